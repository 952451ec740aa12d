#!/usr/bin/env bash
# make demo: kemu's main job on this machine, step by step with timings.
#   1. kemuctl validates the examples (examples/standalone for kemuctl run,
#      examples/cluster for a cluster) and converts a KubeVirt VM;
#   2. kemuctl run boots examples/standalone/vmi-testguest.yaml — the test guest from its
#      containerDisk image, with cloud-init — under QEMU (KVM if a real probe
#      says it works, else TCG), waits for the guest agent, pauses (the guest's
#      tick counter on the console stops), unpauses, and shuts it down with the
#      ACPI power button. Exit 0 when the guest powered itself off.
set -euo pipefail
cd "$(dirname "$0")/.."
kemuctl=$PWD/_out/bin/kemuctl

banner() { printf '\n== %s\n' "$*"; }

banner "kemuctl validate examples/standalone/*.yaml"
"$kemuctl" validate examples/standalone/*.yaml

banner "kemuctl validate --for cluster examples/cluster/*.yaml"
"$kemuctl" validate --for cluster examples/cluster/*.yaml

banner "kemuctl convert examples/kubevirt/vm-cirros.yaml (KubeVirt -> kemu, its clock included)"
"$kemuctl" convert examples/kubevirt/vm-cirros.yaml

banner "kemuctl run --console --wait-agent --then pause,unpause,shutdown examples/standalone/vmi-testguest.yaml"
"$kemuctl" run --console --wait-agent \
	--then sleep=2s,pause,sleep=3s,unpause,sleep=2s,shutdown \
	--timeout 5m examples/standalone/vmi-testguest.yaml
banner "done: the guest booted, its agent answered, it paused, resumed and powered off"
