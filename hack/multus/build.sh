#!/usr/bin/env bash
# Build Multus CNI's thin plugin (the test cluster's Multus, test/cluster
# Options.Multus) from the Go module proxy, pinned in hack/multus/go.mod.
#
# Output: $MULTUS_BIN_DIR (default: <repo root>/_out/multus/bin)/multus.
# Skipped when its stamp records the same version and hash of go.mod +
# go.sum; MULTUS_FORCE=1 rebuilds. Static (CGO off).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
bin_dir="${MULTUS_BIN_DIR:-${root}/_out/multus/bin}"

cd "${here}"
export GOWORK=off CGO_ENABLED=0
unset GOOS GOARCH || true
mod=gopkg.in/k8snetworkplumbingwg/multus-cni.v4
version="$(go list -m -f '{{.Version}}' "${mod}")"
stamp="${version} $(cat go.mod go.sum | sha256sum | cut -c1-16)"

mkdir -p "${bin_dir}"
exec 9>"${bin_dir}/.build.lock"
flock 9
if [[ "${MULTUS_FORCE:-0}" != 1 && -x "${bin_dir}/multus" && -f "${bin_dir}/.stamp" && "$(cat "${bin_dir}/.stamp")" == "${stamp}" ]]; then
	echo "up to date: multus ${version} (${bin_dir}/multus)"
	exit 0
fi
t0=$(date +%s)
echo "building: multus ${version} ..."
go build -trimpath -ldflags "-s -w -X ${mod}/pkg/multus.version=${version}" -o "${bin_dir}/.multus.tmp" "${mod}/cmd/multus"
mv -f "${bin_dir}/.multus.tmp" "${bin_dir}/multus"
echo "${stamp}" >"${bin_dir}/.stamp"
echo "built: multus ${version} in $(($(date +%s) - t0))s"
