#!/usr/bin/env bash
# make demo: what kemu can do on this machine today, step by step with timings.
#   1. kemuctl validates the example VMIs and converts a KubeVirt VM;
#   2. the test guest boots from its containerDisk image under QEMU (TCG unless
#      KVM really works), through a throw-away qcow2 overlay as a containerDisk
#      would, and is paused, resumed and powered off over QMP.
# `kemuctl run examples/vmi-testguest.yaml` takes over step 2 once the launcher
# lands (issue 4); until then this script drives QEMU the same way by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
kemuctl=$root/_out/bin/kemuctl
guest=$root/_out/testguest

t0=$(date +%s%N)
elapsed() { local ms=$((($(date +%s%N) - t0) / 1000000)); printf '%3d.%02ds' $((ms / 1000)) $((ms % 1000 / 10)); }
step() { printf '\n[%s] == %s\n' "$(elapsed)" "$*"; }
say() { printf '[%s]    %s\n' "$(elapsed)" "$*"; }

step "kemuctl validate examples/*.yaml"
"$kemuctl" validate examples/*.yaml

step "kemuctl convert examples/kubevirt/vm-cirros.yaml (a KubeVirt VM; exits 1: its clock is not carried over)"
"$kemuctl" convert examples/kubevirt/vm-cirros.yaml && { echo "expected convert to report the clock" >&2; exit 1; } || true

work=$(mktemp -d /tmp/kemu-demo.XXXXXX)
qemu_pid=
cleanup() {
	if [ -n "$qemu_pid" ] && kill -0 "$qemu_pid" 2>/dev/null; then kill -9 "$qemu_pid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

# wait_marker REGEX SECONDS: polls the console log until a marker matches.
wait_marker() {
	local re=$1 deadline=$(($(date +%s) + $2))
	while ! grep -qE "KEMU-GUEST $re" "$work/console.log" 2>/dev/null; do
		if ! kill -0 "$qemu_pid" 2>/dev/null; then echo "QEMU exited while waiting for '$re'" >&2; return 1; fi
		if (($(date +%s) > deadline)); then echo "timed out after $2 s waiting for '$re'" >&2; return 1; fi
		sleep 0.2
	done
	grep -E "KEMU-GUEST $re" "$work/console.log" | tail -1 | sed 's/.*KEMU-GUEST/    guest:/'
}
ticks() { grep -c 'KEMU-GUEST tick ' "$work/console.log" || true; }
qmp() { # qmp COMMAND: one QMP session, capabilities then the command
	printf '{"execute":"qmp_capabilities"}\n{"execute":"%s"}\n' "$1" |
		socat -t 2 - "UNIX-CONNECT:$work/qmp.sock" | grep -v '"QMP"' | tail -1
}

step "containerDisk: qcow2 overlay over $(basename "$guest")/oci/containerdisk's disk (the base is never written)"
base=$(find "$guest/oci/containerdisk/blobs" -type f -size +1M | head -1)
tar -xzOf "$base" disk/disk.qcow2 >"$work/base.qcow2"
qemu-img create -q -f qcow2 -F qcow2 -b "$work/base.qcow2" "$work/overlay.qcow2"
chmod a-w "$work/base.qcow2"
say "base $(du -h "$work/base.qcow2" | cut -f1), overlay $(du -h "$work/overlay.qcow2" | cut -f1)"

# KVM only if a real guest boots under it: /dev/kvm exists on nested hosts
# where guests hang. A working KVM reaches "ready" in about a second.
accel=tcg
if [ -w /dev/kvm ]; then
	qemu-system-x86_64 -machine q35,accel=kvm -m 128 -nodefaults -no-user-config -display none -no-reboot \
		-kernel "$guest/vmlinuz" -initrd "$guest/initrd.img" \
		-append 'console=ttyS0 quiet kemu.tick=0 kemu.agent=0 kemu.dhcp=0' \
		-serial "file:$work/probe.log" >/dev/null 2>&1 &
	probe=$!
	deadline=$(($(date +%s) + 8))
	while (($(date +%s) < deadline)) && kill -0 "$probe" 2>/dev/null; do
		grep -q 'KEMU-GUEST ready' "$work/probe.log" 2>/dev/null && { accel=kvm; break; }
		sleep 0.2
	done
	kill -9 "$probe" 2>/dev/null || true
	wait "$probe" 2>/dev/null || true
fi
step "boot: qemu-system-x86_64 -machine q35,accel=$accel -m 256 -S, disk via -blockdev (KVM probe said: $([ $accel = kvm ] && echo works || echo 'does not work here, TCG'))"
qemu-system-x86_64 -name testguest -machine "q35,accel=$accel" -m 256 -smp 1 \
	-nodefaults -no-user-config -display none -no-reboot -S \
	-blockdev "driver=file,filename=$work/overlay.qcow2,node-name=root-file" \
	-blockdev "driver=qcow2,file=root-file,node-name=root" \
	-device virtio-blk-pci,drive=root,serial=kemu-root,bootindex=1 \
	-chardev "file,id=console,path=$work/console.log" -serial chardev:console \
	-qmp "unix:$work/qmp.sock,server=on,wait=off" 2>"$work/qemu.err" &
qemu_pid=$!
for _ in $(seq 100); do [ -S "$work/qmp.sock" ] && break; sleep 0.1; done
say "QMP status before cont: $(qmp query-status)"
qmp cont >/dev/null
say "cont sent; waiting for the guest's ready marker"
wait_marker 'ready ' 120
wait_marker 'block name=vda' 1
wait_marker 'tick n=2 ' 30

step "pause (QMP stop): the guest's tick counter stops"
qmp stop >/dev/null
before=$(ticks)
say "QMP status: $(qmp query-status)"
deadline=$(($(date +%s) + 3))
while (($(date +%s) < deadline)); do sleep 0.5; done
after=$(ticks)
say "ticks while paused for 3 s: $((after - before))"
[ "$after" -eq "$before" ] || { echo "guest ticked while paused" >&2; exit 1; }

step "unpause (QMP cont): ticks resume"
qmp cont >/dev/null
wait_marker "tick n=$((after + 1)) " 30

step "graceful shutdown (QMP system_powerdown = ACPI power button)"
qmp system_powerdown >/dev/null
wait_marker 'poweroff ' 30
rc=0
wait "$qemu_pid" || rc=$?
qemu_pid=
say "QEMU exited with status $rc"
[ "$rc" -eq 0 ]
step "done: validate, convert, containerDisk overlay, boot, pause, unpause, ACPI shutdown"
