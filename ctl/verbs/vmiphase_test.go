package verbs

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

func TestVMIPhase(t *testing.T) {
	cond := func(typ v1.VirtualMachineInstanceConditionType, reason, msg string) v1.VirtualMachineInstanceCondition {
		return v1.VirtualMachineInstanceCondition{Type: typ, Status: corev1.ConditionFalse, Reason: reason, Message: msg}
	}
	for _, tc := range []struct {
		name   string
		status v1.VirtualMachineInstanceStatus
		want   string
	}{
		{"no phase yet", v1.VirtualMachineInstanceStatus{}, "none yet"},
		{"running", v1.VirtualMachineInstanceStatus{Phase: v1.Running}, "Running"},
		{"failed by the controller: Synchronized's message", v1.VirtualMachineInstanceStatus{Phase: v1.Failed, Reason: "InvalidImageName",
			Conditions: []v1.VirtualMachineInstanceCondition{cond(v1.VirtualMachineInstanceSynchronized, "InvalidImageName", "container-disk-0 (image kemu.local/BadName:latest): invalid reference format")}},
			"Failed (InvalidImageName: container-disk-0 (image kemu.local/BadName:latest): invalid reference format)"},
		{"crashed: Ready's message", v1.VirtualMachineInstanceStatus{Phase: v1.Failed, Reason: "Crashed",
			Conditions: []v1.VirtualMachineInstanceCondition{cond(v1.VirtualMachineInstanceSynchronized, "Synced", "QEMU 9"),
				cond(v1.VirtualMachineInstanceReady, "Crashed", "QEMU exited: killed by signal 9")}},
			"Failed (Crashed: QEMU exited: killed by signal 9)"},
		{"a reason no condition explains", v1.VirtualMachineInstanceStatus{Phase: v1.Failed, Reason: "Evicted"}, "Failed (Evicted)"},
		{"succeeded", v1.VirtualMachineInstanceStatus{Phase: v1.Succeeded, Reason: "GuestShutdown",
			Conditions: []v1.VirtualMachineInstanceCondition{cond(v1.VirtualMachineInstanceReady, "GuestShutdown", "")}},
			"Succeeded (GuestShutdown)"},
	} {
		if got := vmiPhase(&v1.VirtualMachineInstance{Status: tc.status}); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
