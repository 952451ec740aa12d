#!/usr/bin/env bash
# Builds the KVM probe's guests, embedded by devices/kvm, with GNU binutils:
#   boot.bin  a 512-byte boot sector (boot.S)
#   init.bin  a static /init for an initramfs (init.S)
# build.sh [OUTDIR] (default: beside this script).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
as --64 -o "$tmp/boot.o" "$here/boot.S"
ld -m elf_x86_64 -Ttext=0x7c00 -e _start --oformat=binary -o "$out/boot.bin" "$tmp/boot.o"
size=$(stat -c %s "$out/boot.bin")
[ "$size" -eq 512 ] || { echo "boot.bin is $size bytes, want 512" >&2; exit 1; }
as --64 -o "$tmp/init.o" "$here/init.S"
ld -m elf_x86_64 -static -nostdlib -z noseparate-code -s --build-id=none -e _start -o "$out/init.bin" "$tmp/init.o"
chmod 0644 "$out/boot.bin" "$out/init.bin"
