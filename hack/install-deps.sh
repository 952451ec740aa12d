#!/usr/bin/env bash
# Installs what kemu's build, tests and demo need, only when it is missing:
# Debian packages (--no-install-recommends) and the pinned Go tools the
# Makefile uses (into _out/tools/bin). Safe to run again and again.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
	qemu-system-x86 qemu-utils ovmf          # the hypervisor, qemu-img, EFI firmware
	busybox-static qemu-guest-agent cpio kmod # the test guest's userland and initramfs
	syslinux syslinux-common syslinux-efi mtools dosfstools fdisk # the test guest's bootable disk, no loop mounts
	socat iproute2 git make gcc libc6-dev     # tooling, go test -race needs cgo
	binutils                                  # as, ld: the KVM probe guests (devices/kvm/guest)
	shellcheck                                # make lint: actionlint's and action.yml's shell steps
	passt swtpm swtpm-tools                   # the passt network binding and the emulated TPM (swtpm)
	debootstrap                               # make test-qemu-distro: the Debian 13 root with QEMU 10.x
	protobuf-compiler                         # protoc, for the launcher's command server API
	runc containernetworking-plugins iptables # test/cluster's node (runc under make k8s's containerd 2.x, CNI bridge)
)

# Go tools, pinned. controller-tools and code-generator generate the API.
GO_TOOLS=(
	"sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0"
	"k8s.io/code-generator/cmd/client-gen@v0.36.3"
	"k8s.io/code-generator/cmd/lister-gen@v0.36.3"
	"k8s.io/code-generator/cmd/informer-gen@v0.36.3"
	"honnef.co/go/tools/cmd/staticcheck@v0.8.2"
	"google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12"
	"google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2"
	"github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.4"
	"github.com/rhysd/actionlint/cmd/actionlint@v1.7.12"
	# promtool of Prometheus v3.16.0 (the Go module tags v3 as v0.316.x):
	# `promtool check metrics` over the node agent's and controller's
	# scrapes. Cold (module download and build) it takes minutes.
	"github.com/prometheus/prometheus/cmd/promtool@v0.316.0"
)

log() { printf '[install-deps] %s\n' "$*"; }

missing=()
for p in "${APT_PACKAGES[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing+=("$p")
	fi
done
if ((${#missing[@]})); then
	log "apt: installing ${missing[*]}"
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	export DEBIAN_FRONTEND=noninteractive
	$sudo apt-get update -qq
	$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
	log "apt: all ${#APT_PACKAGES[@]} packages present"
fi
# The test guest downloads Debian's kernel package: the package lists must
# know it even when nothing above had to be installed.
if ! apt-cache show --no-all-versions linux-image-amd64 >/dev/null 2>&1; then
	log "apt: package lists do not know linux-image-amd64; apt-get update"
	[ "$(id -u)" -eq 0 ] && apt-get update -qq || sudo apt-get update -qq
fi

tools=_out/tools/bin
mkdir -p "$tools"
for spec in "${GO_TOOLS[@]}"; do
	pkg=${spec%@*}
	name=${pkg##*/}
	stamp="$tools/.$name.version"
	if [ -x "$tools/$name" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$spec" ]; then
		continue
	fi
	log "go install $spec"
	GOBIN="$PWD/$tools" go install "$spec"
	echo "$spec" >"$stamp"
done
log "go tools: ${#GO_TOOLS[@]} pinned tools in $tools"
