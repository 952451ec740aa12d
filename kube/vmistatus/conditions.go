// Package vmistatus holds the VMI status helpers the controller and the
// node agent both use: conditions with Kubernetes' time semantics and the
// phase with its transition timestamps. Each writer owns its own
// conditions and reasons; these only say how a change is recorded.
package vmistatus

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// SetCondition replaces the condition of cond's type (or adds it). Its
// times are those of the old condition while nothing changed, so a repeated
// sync writes nothing; LastProbeTime moves to now when the status, reason or
// message changes, LastTransitionTime only when the status does.
func SetCondition(vmi *v1.VirtualMachineInstance, cond v1.VirtualMachineInstanceCondition, now metav1.Time) {
	for i := range vmi.Status.Conditions {
		old := &vmi.Status.Conditions[i]
		if old.Type != cond.Type {
			continue
		}
		if old.Status == cond.Status && old.Reason == cond.Reason && old.Message == cond.Message {
			return
		}
		cond.LastTransitionTime = old.LastTransitionTime
		if old.Status != cond.Status {
			cond.LastTransitionTime = now
		}
		cond.LastProbeTime = now
		*old = cond
		return
	}
	cond.LastTransitionTime, cond.LastProbeTime = now, now
	vmi.Status.Conditions = append(vmi.Status.Conditions, cond)
}

// Condition returns the VMI's condition of type typ (nil VMI or none: false).
func Condition(vmi *v1.VirtualMachineInstance, typ v1.VirtualMachineInstanceConditionType) (v1.VirtualMachineInstanceCondition, bool) {
	if vmi == nil {
		return v1.VirtualMachineInstanceCondition{}, false
	}
	for _, c := range vmi.Status.Conditions {
		if c.Type == typ {
			return c, true
		}
	}
	return v1.VirtualMachineInstanceCondition{}, false
}

// HasCondition says whether the VMI has the condition typ with that status
// and, unless reason is empty, that reason.
func HasCondition(vmi *v1.VirtualMachineInstance, typ v1.VirtualMachineInstanceConditionType,
	status corev1.ConditionStatus, reason string) bool {
	c, ok := Condition(vmi, typ)
	return ok && c.Status == status && (reason == "" || c.Reason == reason)
}

// RemoveCondition drops the conditions of type typ.
func RemoveCondition(vmi *v1.VirtualMachineInstance, typ v1.VirtualMachineInstanceConditionType) {
	RemoveConditionIf(vmi, typ, nil)
}

// RemoveConditionIf drops the conditions of type typ that match (all of
// them when match is nil): a writer removes only the ones it set. No
// condition left is a nil list.
func RemoveConditionIf(vmi *v1.VirtualMachineInstance, typ v1.VirtualMachineInstanceConditionType,
	match func(v1.VirtualMachineInstanceCondition) bool) {
	out := vmi.Status.Conditions[:0:0]
	for _, c := range vmi.Status.Conditions {
		if c.Type != typ || (match != nil && !match(c)) {
			out = append(out, c)
		}
	}
	if len(out) != len(vmi.Status.Conditions) {
		vmi.Status.Conditions = out
		if len(out) == 0 {
			vmi.Status.Conditions = nil
		}
	}
}
