#!/usr/bin/env bash
# make images: kemu's images as OCI archives in _out/images (docs/deploy.md):
#
#   kemu-launcher.oci.tar    kemu.local/kemu-launcher:$VERSION   (and :latest)
#   kemu-controller.oci.tar  kemu.local/kemu-controller:$VERSION (and :latest)
#   kemu-api.oci.tar         kemu.local/kemu-api:$VERSION (and :latest)
#   kemu-nodeagent.oci.tar   kemu.local/kemu-nodeagent:$VERSION  (and :latest)
#
# Skipped when up to date: the stamp _out/images/.stamp hashes every input —
# the Go sources and go.mod/go.sum (the binaries), this folder, the version,
# the Debian package versions QEMU and its firmware come from, and the test
# guest's stamp (the KVM probe guest). IMAGES_FORCE=1 rebuilds.
# Needs: make deps (QEMU, OVMF, SeaBIOS, iPXE) and make testguest.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${IMAGES_OUT:-$ROOT/_out/images}
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
TESTGUEST=${TESTGUEST_OUT:-$ROOT/_out/testguest}

[[ -f $TESTGUEST/vmlinuz && -f $TESTGUEST/initrd.img ]] || {
	echo "images: no test guest in $TESTGUEST (the node agent's KVM probe guest): run make testguest" >&2
	exit 1
}
pkgs=(qemu-system-x86 qemu-system-common qemu-system-data qemu-utils seabios ipxe-qemu ovmf swtpm swtpm-libs libtpms0 libc6 ca-certificates passt)
STAMP_KEY=$(
	{
		echo "version=$VERSION"
		go version
		dpkg-query -W "${pkgs[@]}" 2>&1
		cat "$TESTGUEST/.stamp" 2>/dev/null || sha256sum "$TESTGUEST/vmlinuz" "$TESTGUEST/initrd.img"
		sha256sum go.mod go.sum
		# Every Go file but tests, and everything in hack/images.
		find . -path ./_out -prune -o -name '*.go' ! -name '*_test.go' -print | LC_ALL=C sort | xargs sha256sum
		find hack/images -type f | LC_ALL=C sort | xargs sha256sum
	} | sha256sum | awk '{ print $1 }'
)
ARCHIVES=(kemu-launcher.oci.tar kemu-controller.oci.tar kemu-api.oci.tar kemu-nodeagent.oci.tar)

up_to_date() {
	[[ ${IMAGES_FORCE:-0} != 1 ]] || return 1
	[[ -f $OUT/.stamp && $(cat "$OUT/.stamp") == "$STAMP_KEY" ]] || return 1
	local a
	for a in "${ARCHIVES[@]}"; do [[ -f $OUT/$a ]] || return 1; done
}

if up_to_date; then
	echo "images: up to date in ${OUT#"$ROOT"/} ($VERSION)"
	exit 0
fi
mkdir -p "$OUT"
rm -f "$OUT/.stamp"
go run ./hack/images -set kemu -out "$OUT" -version "$VERSION" -testguest "$TESTGUEST"
echo "$VERSION" >"$OUT/VERSION"
echo "$STAMP_KEY" >"$OUT/.stamp"
for a in "${ARCHIVES[@]}"; do
	printf 'images: %-24s %s\n' "$a" "$(du -h "$OUT/$a" | cut -f1)"
done
