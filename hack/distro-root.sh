#!/usr/bin/env bash
# Builds a Debian 13 (trixie) root under _out/distro/debian13 with its own
# QEMU, qemu-img and OVMF, for `make test-qemu-distro`: the QEMU-level suites
# run inside it against another QEMU than the host's (docs/ci.md).
#
# Cached: the root records in .kemu-stamp the hash of this script (suite,
# mirror, packages); it is rebuilt only when the script changes. A half-built
# root never replaces a good one (built next to it, renamed when complete).
set -euo pipefail
cd "$(dirname "$0")/.."

SUITE=trixie
MIRROR=${KEMU_DISTRO_MIRROR:-http://deb.debian.org/debian}
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
ROOT=_out/distro/debian13
# What the QEMU-level tests and the launcher exec inside the root:
PACKAGES=(
	qemu-system-x86 qemu-utils ovmf # the hypervisor, qemu-img, EFI firmware
	iproute2 util-linux mount        # ip, nsenter/unshare, losetup (network and disk tests)
	dosfstools mtools                # mkfs.vfat, mcopy: test/testguest's cloud-init disk
	ca-certificates                  # nothing fetched over TLS today; harmless, keeps https mirrors usable
)

log() { printf '[distro-root] %s\n' "$*"; }

stamp=$(
	sha256sum "$0" | cut -d' ' -f1
	echo "$MIRROR"
)
if [ -x "$ROOT/usr/bin/qemu-system-x86_64" ] && [ "$(cat "$ROOT/.kemu-stamp" 2>/dev/null)" = "$stamp" ]; then
	log "$ROOT is up to date ($(chroot "$ROOT" qemu-system-x86_64 --version | head -1))"
	exit 0
fi

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
if ! command -v debootstrap >/dev/null; then
	log "apt: installing debootstrap"
	export DEBIAN_FRONTEND=noninteractive
	$sudo apt-get update -qq
	$sudo apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi

start=$SECONDS
tmp="$ROOT.tmp"
$sudo rm -rf "$tmp"
mkdir -p "$(dirname "$ROOT")"
include=$(
	IFS=,
	echo "${PACKAGES[*]}"
)
log "debootstrap $SUITE from $MIRROR into $tmp (--include=$include)"
$sudo debootstrap --variant=minbase --keyring="$KEYRING" --include="$include" "$SUITE" "$tmp" "$MIRROR" >"$tmp.log" 2>&1 || {
	tail -n 30 "$tmp.log" >&2
	exit 1
}
$sudo chroot "$tmp" apt-get clean
echo "$stamp" | $sudo tee "$tmp/.kemu-stamp" >/dev/null
$sudo rm -rf "$ROOT" "$tmp.log"
$sudo mv "$tmp" "$ROOT"
log "built $ROOT in $((SECONDS - start)) s: $(chroot "$ROOT" qemu-system-x86_64 --version | head -1)"
