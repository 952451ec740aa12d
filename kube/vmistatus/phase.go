package vmistatus

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// SetPhase moves the VMI to phase and records when it entered it
// (status.phaseTransitionTimestamps); the same phase again changes nothing.
func SetPhase(vmi *v1.VirtualMachineInstance, phase v1.VirtualMachineInstancePhase, now metav1.Time) {
	if vmi.Status.Phase == phase {
		return
	}
	vmi.Status.Phase = phase
	vmi.Status.PhaseTransitionTimestamps = append(vmi.Status.PhaseTransitionTimestamps,
		v1.VirtualMachineInstancePhaseTransitionTimestamp{Phase: phase, PhaseTransitionTimestamp: now})
}
