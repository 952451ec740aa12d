#!/usr/bin/env bash
# Builds the kemu test guest from Debian packages only (no Docker, no loop
# mounts, no network but apt and the Go module proxy):
#
#   _out/testguest/vmlinuz                    Debian kernel (linux-image-amd64's ABI package)
#   _out/testguest/initrd.img                 busybox-static initramfs (gzip newc cpio), /init = hack/testguest/init
#   _out/testguest/disk.qcow2                 MBR disk, one FAT partition, syslinux for BIOS (SeaBIOS) and EFI (OVMF)
#   _out/testguest/oci/containerdisk/         OCI layout, KubeVirt containerDisk: /disk/disk.qcow2 (107:107)
#   _out/testguest/oci/kernelboot/            OCI layout: /boot/vmlinuz, /boot/initrd.img
#   _out/testguest/oci/*.oci.tar              the same layouts as OCI archives (tar of the layout)
#   _out/testguest/oci/*.docker.tar           the same images as `docker save` tarballs
#   _out/testguest/manifest.json              kernel version, artifact names, marker protocol
#
# Idempotent: skips everything when the stamp (hash of inputs) matches.
# Environment:
#   TESTGUEST_OUT          output directory (default <repo>/_out/testguest; relative = to the repo root)
#   TESTGUEST_CACHE        cache directory (default <repo>/_out/cache/testguest)
#   TESTGUEST_KERNEL_PKG   kernel package (default: resolved from linux-image-amd64)
#   TESTGUEST_FORCE=1      rebuild even if up to date
# Needs (Debian): apt, dpkg, kmod, cpio, busybox-static, qemu-guest-agent,
#   qemu-utils, fdisk, dosfstools, mtools, syslinux, syslinux-common,
#   syslinux-efi, go.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=${TESTGUEST_OUT:-$ROOT/_out/testguest}
CACHE=${TESTGUEST_CACHE:-$ROOT/_out/cache/testguest}
# Relative overrides are relative to the repository root (as in test/testguest).
case "$OUT" in /*) ;; *) OUT=$ROOT/$OUT ;; esac
case "$CACHE" in /*) ;; *) CACHE=$ROOT/$CACHE ;; esac

# Fixed timestamp for reproducible artifacts (2000-01-01T00:00:00Z).
export SOURCE_DATE_EPOCH=946684800
export LC_ALL=C TZ=UTC

# Modules the guest loads, in this order (dependencies are resolved below).
MODULES=(
	virtio_pci virtio_mmio
	sd_mod sr_mod
	virtio_blk virtio_scsi ahci
	virtio_net virtio_console virtio_rng virtio_balloon
	button evdev
	isofs vfat nls_cp437 nls_ascii nls_utf8 nls_iso8859-1
	fuse virtiofs
	i6300esb tpm_tis tpm_crb
	vmw_vsock_virtio_transport virtio_input
	xhci_pci usbhid hid_generic
)

# Disk layout: MBR, one bootable FAT16 partition at 1 MiB.
PART_START=2048             # sectors
PART_MIB=64                 # partition size
DISK_SECTORS=$((PART_START + PART_MIB * 2048))

log() { echo "testguest: $*" >&2; }
die() {
	echo "testguest: error: $*" >&2
	exit 1
}

need() {
	local missing=() c
	for c in "$@"; do
		command -v "$c" >/dev/null 2>&1 || missing+=("$c")
	done
	((${#missing[@]} == 0)) || die "missing commands: ${missing[*]} (see hack/testguest/README.md for the Debian packages)"
}

need apt-cache apt-get dpkg-deb dpkg-query depmod modprobe cpio gzip busybox qemu-ga ldd \
	qemu-img sfdisk mkfs.vfat mcopy mmd syslinux flock sha256sum go

for f in /bin/busybox /usr/lib/syslinux/mbr/mbr.bin /usr/lib/SYSLINUX.EFI/efi64/syslinux.efi \
	/usr/lib/syslinux/modules/efi64/ldlinux.e64; do
	[[ -e $f ]] || die "missing $f (packages busybox-static, syslinux-common, syslinux-efi)"
done

mkdir -p "$CACHE"
exec 9>"$CACHE/lock"
flock 9

# ------------------------------------------------------------------ inputs --

# The ABI package linux-image-amd64 depends on, with its exact version: one
# `apt-cache show` (same answer as `apt-cache depends`, and ~0.5 s cheaper:
# every apt-cache call parses the package lists here).
KPKG=${TESTGUEST_KERNEL_PKG:-}
KPKG_VERSION=
if [[ -z $KPKG ]]; then
	read -r KPKG KPKG_VERSION < <(apt-cache show --no-all-versions linux-image-amd64 2>/dev/null |
		awk '$1 == "Depends:" {
			for (i = 2; i <= NF; i++) if ($i ~ /^linux-image-[0-9]/) {
				p = $i; sub(/,$/, "", p); v = ""
				if ($(i + 1) == "(=") { v = $(i + 2); sub(/\).*$/, "", v) }
				print p, v; exit
			}
		}') || true
	[[ -n $KPKG ]] || die "cannot resolve linux-image-amd64 (run apt-get update)"
fi
KVER=${KPKG#linux-image-}
if [[ -z $KPKG_VERSION ]]; then
	KPKG_VERSION=$(apt-cache show --no-all-versions "$KPKG" 2>/dev/null | awk '/^Version:/ { print $2; exit }')
fi
[[ -n $KPKG_VERSION ]] || die "no candidate version for $KPKG (run apt-get update)"

host_versions=$(dpkg-query -W -f '${Package}=${Version}\n' busybox-static qemu-guest-agent syslinux syslinux-common \
	syslinux-efi 2>/dev/null | sort)

STAMP_KEY=$(
	{
		echo "kernel=$KPKG=$KPKG_VERSION"
		echo "modules=${MODULES[*]}"
		echo "$host_versions"
		sha256sum "$HERE/build.sh" "$HERE/init" "$HERE"/ocilayout/*.go | awk '{ print $1 }'
		grep -h 'go-containerregistry ' "$ROOT/go.mod" || true
	} | sha256sum | awk '{ print $1 }'
)

ARTIFACTS=(vmlinuz initrd.img disk.qcow2 manifest.json
	oci/containerdisk/index.json oci/kernelboot/index.json
	oci/containerdisk.oci.tar oci/kernelboot.oci.tar oci/containerdisk.docker.tar oci/kernelboot.docker.tar)

up_to_date() {
	[[ ${TESTGUEST_FORCE:-0} != 1 ]] || return 1
	[[ -f $OUT/.stamp && $(cat "$OUT/.stamp") == "$STAMP_KEY" ]] || return 1
	local a
	for a in "${ARTIFACTS[@]}"; do [[ -e $OUT/$a ]] || return 1; done
}

if up_to_date; then
	log "up to date: $OUT (kernel $KVER)"
	exit 0
fi
log "building into $OUT (kernel $KPKG $KPKG_VERSION)"

WORK=$CACHE/work
rm -rf "$WORK"
mkdir -p "$WORK"
NEW=$OUT.new
rm -rf "$NEW"
mkdir -p "$NEW"

# ------------------------------------------------------------------ kernel --

DEBDIR=$CACHE/debs
mkdir -p "$DEBDIR"
DEB=$DEBDIR/${KPKG}_${KPKG_VERSION//:/%3a}_amd64.deb
if [[ ! -s $DEB ]]; then
	log "downloading $KPKG $KPKG_VERSION"
	rm -f "$DEBDIR/${KPKG}"_*.deb
	(cd "$DEBDIR" && apt-get download -q -o APT::Sandbox::User=root "$KPKG=$KPKG_VERSION" >&2)
	[[ -s $DEB ]] || DEB=$(ls "$DEBDIR/${KPKG}"_*.deb | head -n 1)
	[[ -s $DEB ]] || die "apt-get download $KPKG produced no .deb"
fi

# Extract the kernel and the module tree into a scratch dir, resolve the
# modules' dependencies there, keep only those, drop the rest.
# ~400 MB, thrown away below: in RAM when /dev/shm is there (3x faster).
if [[ -d /dev/shm && -w /dev/shm ]]; then
	FULL=$(mktemp -d /dev/shm/kemu-testguest-kernel.XXXXXX)
else
	FULL=$WORK/kernel-full
	mkdir -p "$FULL"
fi
trap 'rm -rf "$FULL"' EXIT
dpkg-deb --fsys-tarfile "$DEB" | tar -x -C "$FULL" "./boot/vmlinuz-$KVER" "./lib/modules/$KVER"
depmod -b "$FULL" "$KVER"
cp "$FULL/boot/vmlinuz-$KVER" "$NEW/vmlinuz"

ROOTFS=$WORK/initramfs
MODDIR=lib/modules/$KVER
mkdir -p "$ROOTFS/$MODDIR" "$ROOTFS/etc/kemu"
: >"$WORK/modules.order"
for m in "${MODULES[@]}"; do
	deps=$(modprobe -d "$FULL" -S "$KVER" --show-depends "$m") || die "module $m not found in $KPKG"
	awk -v full="$FULL/$MODDIR/" '$1 == "insmod" { p = $2; sub("^" full, "", p); print p }' <<<"$deps" >>"$WORK/modules.order"
done
# Drop CPU-specific crypto (crct10dif-pclmul: ENODEV under TCG's CPU models);
# the generic implementations come in through softdeps.
awk '!seen[$0]++ && $0 !~ /^kernel\/arch\/x86\/crypto\//' "$WORK/modules.order" >"$ROOTFS/etc/kemu/modules"
while read -r rel; do
	mkdir -p "$ROOTFS/$MODDIR/$(dirname "$rel")"
	cp "$FULL/$MODDIR/$rel" "$ROOTFS/$MODDIR/$rel"
done <"$ROOTFS/etc/kemu/modules"
cp "$FULL/$MODDIR/modules.order" "$FULL/$MODDIR/modules.builtin" "$ROOTFS/$MODDIR/" 2>/dev/null || true
[[ -f $FULL/$MODDIR/modules.builtin.modinfo ]] && cp "$FULL/$MODDIR/modules.builtin.modinfo" "$ROOTFS/$MODDIR/"
depmod -b "$ROOTFS" "$KVER"
rm -rf "$FULL"
log "kernel $KVER: $(wc -l <"$ROOTFS/etc/kemu/modules") modules"

# --------------------------------------------------------------- initramfs --

install -D -m 0755 /bin/busybox "$ROOTFS/bin/busybox"
while read -r applet; do
	case "$applet" in linuxrc | */init) continue ;; esac
	[[ -e $ROOTFS/$applet || -L $ROOTFS/$applet ]] && continue
	mkdir -p "$ROOTFS/$(dirname "$applet")"
	ln -s /bin/busybox "$ROOTFS/$applet"
done < <(/bin/busybox --list-full)
install -m 0755 "$HERE/init" "$ROOTFS/init"

# qemu-ga, its shared libraries and the dynamic loader, at their host paths.
install -D -m 0755 "$(command -v qemu-ga)" "$ROOTFS/usr/sbin/qemu-ga"
while read -r lib; do
	[[ -n $lib ]] || continue
	install -D -m 0755 "$(readlink -f "$lib")" "$ROOTFS$lib"
done < <(ldd "$(command -v qemu-ga)" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u)

mkdir -p "$ROOTFS"/{proc,sys,dev,run,tmp,mnt,root,var/lib,etc/acpi/PWRF}
ln -s ../run "$ROOTFS/var/run"
cat >"$ROOTFS/etc/acpi/PWRF/00000080" <<'EOF'
#!/bin/sh
exec /init --event poweroff acpi
EOF
cat >"$ROOTFS/etc/kemu/udhcpc.script" <<'EOF'
#!/bin/sh
exec /init --event udhcpc "$@"
EOF
rm -f "$ROOTFS/sbin/shutdown"
cat >"$ROOTFS/sbin/shutdown" <<'EOF'
#!/bin/sh
# qemu-ga's guest-shutdown runs: /sbin/shutdown -h|-P|-r|-H +0 "message"
exec /init --event shutdown "$@"
EOF
chmod 0755 "$ROOTFS/etc/acpi/PWRF/00000080" "$ROOTFS/etc/kemu/udhcpc.script" "$ROOTFS/sbin/shutdown"
cat >"$ROOTFS/etc/os-release" <<EOF
NAME="kemu testguest"
ID=kemu-testguest
ID_LIKE=debian
VERSION_ID=1
PRETTY_NAME="kemu testguest (Debian kernel $KVER)"
EOF
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$ROOTFS/etc/passwd"
printf 'root:x:0:\ntty:x:5:\n' >"$ROOTFS/etc/group"
printf '127.0.0.1 localhost\n' >"$ROOTFS/etc/hosts"
echo "$KVER" >"$ROOTFS/etc/kemu/kernel-version"

find "$ROOTFS" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
(cd "$ROOTFS" && find . -mindepth 1 | sort | cpio -o -H newc -R 0:0 --reproducible --quiet) |
	gzip -6 -n >"$NEW/initrd.img"

# -------------------------------------------------------------------- disk --

BOOTFILES=$WORK/boot
mkdir -p "$BOOTFILES"
cfg() { # LOADER
	cat <<EOF
SERIAL 0 115200
DEFAULT kemu
PROMPT 0
TIMEOUT 0
LABEL kemu
  LINUX /vmlinuz
  INITRD /initrd.img
  APPEND console=ttyS0,115200 quiet kemu.loader=$1
EOF
}
cfg syslinux-bios >"$BOOTFILES/syslinux.cfg"
cfg syslinux-efi | grep -v '^SERIAL' >"$BOOTFILES/syslinux-efi.cfg"
touch -d "@$SOURCE_DATE_EPOCH" "$BOOTFILES"/* "$NEW/vmlinuz" "$NEW/initrd.img"

RAW=$WORK/disk.raw
OFF=$((PART_START * 512))
truncate -s $((DISK_SECTORS * 512)) "$RAW"
sfdisk -q --no-reread --no-tell-kernel "$RAW" <<EOF
label: dos
label-id: 0x4b454d55
unit: sectors

start=$PART_START, size=$((PART_MIB * 2048)), type=e, bootable
EOF
mkfs.vfat --invariant -i 4b454d55 -n KEMUBOOT -F 16 -h "$PART_START" --offset="$PART_START" \
	"$RAW" $((PART_MIB * 1024)) >/dev/null
export MTOOLS_SKIP_CHECK=1
IMG="$RAW@@$OFF"
mcopy -m -i "$IMG" "$NEW/vmlinuz" ::/vmlinuz
mcopy -m -i "$IMG" "$NEW/initrd.img" ::/initrd.img
mcopy -m -i "$IMG" "$BOOTFILES/syslinux.cfg" ::/syslinux.cfg
mmd -i "$IMG" ::/EFI ::/EFI/BOOT
cp /usr/lib/SYSLINUX.EFI/efi64/syslinux.efi "$BOOTFILES/BOOTX64.EFI"
cp /usr/lib/syslinux/modules/efi64/ldlinux.e64 "$BOOTFILES/ldlinux.e64"
touch -d "@$SOURCE_DATE_EPOCH" "$BOOTFILES"/*
mcopy -m -i "$IMG" "$BOOTFILES/BOOTX64.EFI" ::/EFI/BOOT/BOOTX64.EFI
mcopy -m -i "$IMG" "$BOOTFILES/ldlinux.e64" ::/EFI/BOOT/ldlinux.e64
mcopy -m -i "$IMG" "$BOOTFILES/syslinux-efi.cfg" ::/EFI/BOOT/syslinux.cfg
syslinux --install --offset "$OFF" "$RAW"
dd if=/usr/lib/syslinux/mbr/mbr.bin of="$RAW" bs=440 count=1 conv=notrunc status=none
qemu-img convert -q -f raw -O qcow2 "$RAW" "$NEW/disk.qcow2"
rm -f "$RAW"

# --------------------------------------------------------------------- OCI --

log "writing OCI layouts"
(cd "$ROOT" && go run ./hack/testguest/ocilayout \
	-out "$NEW/oci" -disk "$NEW/disk.qcow2" -kernel "$NEW/vmlinuz" -initrd "$NEW/initrd.img" \
	-epoch "$SOURCE_DATE_EPOCH")

# ---------------------------------------------------------------- manifest --

sha() { sha256sum "$1" | awk '{ print $1 }'; }
cat >"$NEW/manifest.json" <<EOF
{
  "markerProtocol": 1,
  "kernelVersion": "$KVER",
  "kernelPackage": "$KPKG",
  "kernelPackageVersion": "$KPKG_VERSION",
  "kernel": "vmlinuz",
  "initrd": "initrd.img",
  "disk": "disk.qcow2",
  "containerDisk": "oci/containerdisk",
  "kernelBoot": "oci/kernelboot",
  "sha256": {
    "vmlinuz": "$(sha "$NEW/vmlinuz")",
    "initrd.img": "$(sha "$NEW/initrd.img")",
    "disk.qcow2": "$(sha "$NEW/disk.qcow2")"
  }
}
EOF
echo "$STAMP_KEY" >"$NEW/.stamp"

# Swap the new tree in.
rm -rf "$OUT.old"
[[ -e $OUT ]] && mv "$OUT" "$OUT.old"
mv "$NEW" "$OUT"
rm -rf "$OUT.old" "$WORK"
log "done: $(du -sh "$OUT" | awk '{ print $1 }') in $OUT"
