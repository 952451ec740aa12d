package verbs

import (
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// vmiPhase is how kemuctl names a VMI's phase in what it prints: the phase
// ("none yet" before the controller set one) and, when the VMI says why
// (status.reason: a failed or finished VMI), the reason with the message of
// the condition that carries it (the controller's Synchronized, the node
// agent's Ready), as `Failed (InvalidImageName: …)`.
func vmiPhase(vmi *v1.VirtualMachineInstance) string {
	phase := string(vmi.Status.Phase)
	if phase == "" {
		phase = "none yet"
	}
	reason := vmi.Status.Reason
	if reason == "" {
		return phase
	}
	for _, c := range vmi.Status.Conditions {
		if c.Reason == reason && c.Message != "" {
			return phase + " (" + reason + ": " + c.Message + ")"
		}
	}
	return phase + " (" + reason + ")"
}
