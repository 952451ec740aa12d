package vmistatus

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

var (
	t0 = metav1.NewTime(time.Unix(1000, 0))
	t1 = metav1.NewTime(time.Unix(2000, 0))
)

func cond(typ v1.VirtualMachineInstanceConditionType, status corev1.ConditionStatus, reason, msg string, probe, transition metav1.Time) v1.VirtualMachineInstanceCondition {
	return v1.VirtualMachineInstanceCondition{Type: typ, Status: status, Reason: reason, Message: msg,
		LastProbeTime: probe, LastTransitionTime: transition}
}

func TestSetCondition(t *testing.T) {
	ready := v1.VirtualMachineInstanceReady
	paused := v1.VirtualMachineInstancePaused
	for _, tc := range []struct {
		name string
		have []v1.VirtualMachineInstanceCondition
		set  v1.VirtualMachineInstanceCondition
		want []v1.VirtualMachineInstanceCondition
	}{
		{"added with both times now", nil, cond(ready, corev1.ConditionTrue, "", "", metav1.Time{}, metav1.Time{}),
			[]v1.VirtualMachineInstanceCondition{cond(ready, corev1.ConditionTrue, "", "", t1, t1)}},
		{"unchanged: old times kept", []v1.VirtualMachineInstanceCondition{cond(ready, corev1.ConditionTrue, "r", "m", t0, t0)},
			cond(ready, corev1.ConditionTrue, "r", "m", metav1.Time{}, metav1.Time{}),
			[]v1.VirtualMachineInstanceCondition{cond(ready, corev1.ConditionTrue, "r", "m", t0, t0)}},
		{"new reason: probe time moves, transition time stays", []v1.VirtualMachineInstanceCondition{cond(ready, corev1.ConditionFalse, "a", "m", t0, t0)},
			cond(ready, corev1.ConditionFalse, "b", "m", metav1.Time{}, metav1.Time{}),
			[]v1.VirtualMachineInstanceCondition{cond(ready, corev1.ConditionFalse, "b", "m", t1, t0)}},
		{"new message: probe time moves", []v1.VirtualMachineInstanceCondition{cond(ready, corev1.ConditionFalse, "a", "m", t0, t0)},
			cond(ready, corev1.ConditionFalse, "a", "n", metav1.Time{}, metav1.Time{}),
			[]v1.VirtualMachineInstanceCondition{cond(ready, corev1.ConditionFalse, "a", "n", t1, t0)}},
		{"new status: both move, others untouched", []v1.VirtualMachineInstanceCondition{
			cond(paused, corev1.ConditionTrue, "p", "", t0, t0), cond(ready, corev1.ConditionFalse, "a", "", t0, t0)},
			cond(ready, corev1.ConditionTrue, "", "", metav1.Time{}, metav1.Time{}),
			[]v1.VirtualMachineInstanceCondition{cond(paused, corev1.ConditionTrue, "p", "", t0, t0), cond(ready, corev1.ConditionTrue, "", "", t1, t1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vmi := &v1.VirtualMachineInstance{Status: v1.VirtualMachineInstanceStatus{Conditions: tc.have}}
			SetCondition(vmi, tc.set, t1)
			if !equality.Semantic.DeepEqual(vmi.Status.Conditions, tc.want) {
				t.Errorf("conditions\n%+v\nwant\n%+v", vmi.Status.Conditions, tc.want)
			}
		})
	}
}

func TestConditionQueries(t *testing.T) {
	vmi := &v1.VirtualMachineInstance{Status: v1.VirtualMachineInstanceStatus{Conditions: []v1.VirtualMachineInstanceCondition{
		cond(v1.VirtualMachineInstanceSynchronized, corev1.ConditionFalse, "PVCNotFound", "", t0, t0),
		cond(v1.VirtualMachineInstanceReady, corev1.ConditionTrue, "", "", t0, t0)}}}
	for _, tc := range []struct {
		name   string
		vmi    *v1.VirtualMachineInstance
		typ    v1.VirtualMachineInstanceConditionType
		status corev1.ConditionStatus
		reason string
		want   bool
	}{
		{"status and reason", vmi, v1.VirtualMachineInstanceSynchronized, corev1.ConditionFalse, "PVCNotFound", true},
		{"any reason", vmi, v1.VirtualMachineInstanceSynchronized, corev1.ConditionFalse, "", true},
		{"other reason", vmi, v1.VirtualMachineInstanceSynchronized, corev1.ConditionFalse, "FailedCreate", false},
		{"other status", vmi, v1.VirtualMachineInstanceReady, corev1.ConditionFalse, "", false},
		{"no such condition", vmi, v1.VirtualMachineInstancePaused, corev1.ConditionTrue, "", false},
		{"no VMI", nil, v1.VirtualMachineInstanceReady, corev1.ConditionTrue, "", false},
	} {
		if got := HasCondition(tc.vmi, tc.typ, tc.status, tc.reason); got != tc.want {
			t.Errorf("%s: HasCondition = %v", tc.name, got)
		}
		if _, ok := Condition(tc.vmi, tc.typ); ok != (tc.vmi != nil && tc.typ != v1.VirtualMachineInstancePaused) {
			t.Errorf("%s: Condition found %v", tc.name, ok)
		}
	}
}

func TestRemoveCondition(t *testing.T) {
	sync := v1.VirtualMachineInstanceSynchronized
	ready := v1.VirtualMachineInstanceReady
	mine := func(c v1.VirtualMachineInstanceCondition) bool { return c.Reason == "Mine" }
	for _, tc := range []struct {
		name  string
		have  []v1.VirtualMachineInstanceCondition
		typ   v1.VirtualMachineInstanceConditionType
		match func(v1.VirtualMachineInstanceCondition) bool
		want  []v1.VirtualMachineInstanceCondition
	}{
		{"the type goes, others stay", []v1.VirtualMachineInstanceCondition{cond(sync, "False", "x", "", t0, t0), cond(ready, "True", "", "", t0, t0)},
			sync, nil, []v1.VirtualMachineInstanceCondition{cond(ready, "True", "", "", t0, t0)}},
		{"the last one: nil list", []v1.VirtualMachineInstanceCondition{cond(sync, "False", "x", "", t0, t0)}, sync, nil, nil},
		{"absent: unchanged", []v1.VirtualMachineInstanceCondition{cond(ready, "True", "", "", t0, t0)}, sync, nil,
			[]v1.VirtualMachineInstanceCondition{cond(ready, "True", "", "", t0, t0)}},
		{"only a matching one goes", []v1.VirtualMachineInstanceCondition{cond(sync, "False", "Mine", "", t0, t0)}, sync, mine, nil},
		{"another writer's stays", []v1.VirtualMachineInstanceCondition{cond(sync, "False", "Theirs", "", t0, t0)}, sync, mine,
			[]v1.VirtualMachineInstanceCondition{cond(sync, "False", "Theirs", "", t0, t0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vmi := &v1.VirtualMachineInstance{Status: v1.VirtualMachineInstanceStatus{Conditions: tc.have}}
			RemoveConditionIf(vmi, tc.typ, tc.match)
			if !equality.Semantic.DeepEqual(vmi.Status.Conditions, tc.want) || (tc.want == nil) != (vmi.Status.Conditions == nil) {
				t.Errorf("conditions %+v, want %+v", vmi.Status.Conditions, tc.want)
			}
			if tc.match == nil {
				vmi.Status.Conditions = tc.have
				RemoveCondition(vmi, tc.typ)
				if !equality.Semantic.DeepEqual(vmi.Status.Conditions, tc.want) {
					t.Errorf("RemoveCondition: %+v", vmi.Status.Conditions)
				}
			}
		})
	}
}

func TestSetPhase(t *testing.T) {
	vmi := &v1.VirtualMachineInstance{}
	SetPhase(vmi, v1.Pending, t0)
	SetPhase(vmi, v1.Pending, t1) // same phase: nothing
	SetPhase(vmi, v1.Scheduling, t1)
	want := []v1.VirtualMachineInstancePhaseTransitionTimestamp{{Phase: v1.Pending, PhaseTransitionTimestamp: t0},
		{Phase: v1.Scheduling, PhaseTransitionTimestamp: t1}}
	if vmi.Status.Phase != v1.Scheduling || !equality.Semantic.DeepEqual(vmi.Status.PhaseTransitionTimestamps, want) {
		t.Errorf("phase %s, timestamps %+v", vmi.Status.Phase, vmi.Status.PhaseTransitionTimestamps)
	}
}
