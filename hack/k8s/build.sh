#!/usr/bin/env bash
# Build real Kubernetes control-plane binaries (and etcd) from the Go module
# proxy, using the pinned versions in hack/k8s/go.mod, and the test nodes'
# containerd (containerd, containerd-shim-runc-v2, ctr) pinned in
# hack/containerd/go.mod.
#
# Usage: hack/k8s/build.sh [component...]
#   components: etcd kube-apiserver kubectl kube-controller-manager
#               kube-scheduler kubelet containerd   (or "all")
#   default:    etcd kube-apiserver kubectl
#
# Output: $K8S_BIN_DIR (default: <repo root>/_out/k8s/bin).
# A binary is skipped when its stamp (<bin dir>/.stamps/<name>) records the
# same version and the same hash of hack/k8s/go.mod + go.sum. Set
# K8S_FORCE=1 to rebuild anyway. CGO is off by default (static binaries);
# override with CGO_ENABLED=1.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
bin_dir="${K8S_BIN_DIR:-${root}/_out/k8s/bin}"
stamp_dir="${bin_dir}/.stamps"

all=(etcd kube-apiserver kubectl kube-controller-manager kube-scheduler kubelet containerd)
# containerd's component builds these three.
containerd_bins=(containerd containerd-shim-runc-v2 ctr)
default=(etcd kube-apiserver kubectl)

if [[ $# -eq 0 ]]; then
	want=("${default[@]}")
elif [[ $# -eq 1 && "$1" == "all" ]]; then
	want=("${all[@]}")
else
	want=("$@")
fi

for c in "${want[@]}"; do
	case "$c" in
	etcd | kube-apiserver | kubectl | kube-controller-manager | kube-scheduler | kubelet | containerd) ;;
	-h | --help)
		sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*)
		echo "build.sh: unknown component '$c' (known: ${all[*]} all)" >&2
		exit 2
		;;
	esac
done

cd "${here}"
# This module must be built on its own, never through a go.work of a parent.
export GOWORK=off
export CGO_ENABLED="${CGO_ENABLED:-0}"
unset GOOS GOARCH || true

k8s_version="$(go list -m -f '{{.Version}}' k8s.io/kubernetes)"
etcd_version="$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)"
mod_hash="$(cat go.mod go.sum | sha256sum | cut -c1-16)"
ctrd_dir="${root}/hack/containerd"
ctrd_version="$(cd "${ctrd_dir}" && go list -m -f '{{.Version}}' github.com/containerd/containerd/v2)"
ctrd_hash="$(cat "${ctrd_dir}/go.mod" "${ctrd_dir}/go.sum" | sha256sum | cut -c1-16)"

# v1.36.3 -> major 1, minor 36
ver="${k8s_version#v}"
major="${ver%%.*}"
rest="${ver#*.}"
minor="${rest%%.*}"

k8s_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	k8s_ldflags+=" -X ${pkg}.gitVersion=${k8s_version}"
	k8s_ldflags+=" -X ${pkg}.gitMajor=${major}"
	k8s_ldflags+=" -X ${pkg}.gitMinor=${minor}"
	k8s_ldflags+=" -X ${pkg}.gitTreeState=clean"
done
# etcd reports its version from a constant; only the git SHA is stamped.
etcd_ldflags="-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=${etcd_version}"

version_of() {
	case "$1" in
	etcd) echo "${etcd_version}" ;;
	containerd) echo "${ctrd_version}" ;;
	*) echo "${k8s_version}" ;;
	esac
}
stamp_of() {
	if [[ "$1" == containerd ]]; then echo "${ctrd_version} ${ctrd_hash}"; else echo "$(version_of "$1") ${mod_hash}"; fi
}

mkdir -p "${bin_dir}" "${stamp_dir}"

# Serialise concurrent invocations (e.g. several test packages at once).
exec 9>"${bin_dir}/.build.lock"
flock 9

todo_k8s=()
todo_etcd=0
todo_ctrd=0
for c in "${want[@]}"; do
	if [[ "${K8S_FORCE:-0}" != 1 && -x "${bin_dir}/${c}" && -f "${stamp_dir}/${c}" &&
		"$(cat "${stamp_dir}/${c}")" == "$(stamp_of "$c")" ]]; then
		echo "up to date: ${c} $(version_of "$c") (${bin_dir}/${c})"
		continue
	fi
	if [[ "$c" == etcd ]]; then
		todo_etcd=1
	elif [[ "$c" == containerd ]]; then
		todo_ctrd=1
	else
		# de-duplicate
		dup=0
		for t in "${todo_k8s[@]+"${todo_k8s[@]}"}"; do [[ "$t" == "$c" ]] && dup=1; done
		[[ $dup == 0 ]] && todo_k8s+=("$c")
	fi
done

if [[ ${#todo_k8s[@]} -eq 0 && ${todo_etcd} -eq 0 && ${todo_ctrd} -eq 0 ]]; then
	exit 0
fi

tmp="$(mktemp -d "${bin_dir}/.tmp.XXXXXX")"
trap 'rm -rf "${tmp}"' EXIT

start_all=$(date +%s)

if [[ ${todo_etcd} -eq 1 ]]; then
	t0=$(date +%s)
	echo "building: etcd ${etcd_version} ..."
	go build -trimpath -ldflags "${etcd_ldflags}" -o "${tmp}/etcd" go.etcd.io/etcd/server/v3
	mv -f "${tmp}/etcd" "${bin_dir}/etcd"
	stamp_of etcd >"${stamp_dir}/etcd"
	echo "built: etcd ${etcd_version} in $(($(date +%s) - t0))s"
fi

if [[ ${#todo_k8s[@]} -gt 0 ]]; then
	t0=$(date +%s)
	pkgs=()
	for c in "${todo_k8s[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/${c}"); done
	echo "building: ${todo_k8s[*]} ${k8s_version} ..."
	# One invocation so the packages share compilation and link in parallel.
	go build -trimpath -ldflags "${k8s_ldflags}" -o "${tmp}/" "${pkgs[@]}"
	for c in "${todo_k8s[@]}"; do
		mv -f "${tmp}/${c}" "${bin_dir}/${c}"
		stamp_of "$c" >"${stamp_dir}/${c}"
	done
	echo "built: ${todo_k8s[*]} ${k8s_version} in $(($(date +%s) - t0))s"
fi

if [[ ${todo_ctrd} -eq 1 ]]; then
	t0=$(date +%s)
	echo "building: containerd ${ctrd_version} ..."
	pkgs=()
	for c in "${containerd_bins[@]}"; do pkgs+=("github.com/containerd/containerd/v2/cmd/${c}"); done
	# Static, without the snapshotters the nodes do not use (they need cgo
	# or kernel modules): overlayfs and native remain.
	(cd "${ctrd_dir}" && go build -trimpath -tags "no_btrfs no_devmapper no_zfs no_aufs" \
		-ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=${ctrd_version}" -o "${tmp}/" "${pkgs[@]}")
	for c in "${containerd_bins[@]}"; do mv -f "${tmp}/${c}" "${bin_dir}/${c}"; done
	stamp_of containerd >"${stamp_dir}/containerd"
	echo "built: containerd ${ctrd_version} in $(($(date +%s) - t0))s"
fi

echo "done in $(($(date +%s) - start_all))s -> ${bin_dir}"
