package vmi

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/kube/vmistatus"
	"github.com/kemu-dev/kemu/launcher/rpc"
)

// The Ready condition follows the launcher Pod's Ready condition only when
// the VMI has a readinessProbe, and only while the guest runs.
func TestReadyConditionReadinessProbe(t *testing.T) {
	running := &rpc.Domain{State: rpc.DomainState_Running}
	paused := &rpc.Domain{State: rpc.DomainState_Paused, Reason: rpc.DomainReason_User}
	podReady := &corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue}
	podNotReady := &corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady"}
	probe := &v1.Probe{Handler: v1.Handler{TCPSocket: &corev1.TCPSocketAction{}}}
	for _, tc := range []struct {
		name   string
		probe  *v1.Probe
		dom    *rpc.Domain
		pod    *corev1.PodCondition
		status corev1.ConditionStatus
		reason string
	}{
		{"no probe: running is ready", nil, running, nil, corev1.ConditionTrue, ""},
		{"no probe: the Pod's readiness is ignored", nil, running, podNotReady, corev1.ConditionTrue, ""},
		{"probe passes", probe, running, podReady, corev1.ConditionTrue, ""},
		{"probe fails", probe, running, podNotReady, corev1.ConditionFalse, ReasonReadinessProbe},
		{"no Pod condition yet", probe, running, nil, corev1.ConditionFalse, ReasonPodConditionMissing},
		{"paused wins over a ready Pod", probe, paused, podReady, corev1.ConditionFalse, ReasonPaused},
	} {
		vmi := &v1.VirtualMachineInstance{}
		vmi.Spec.ReadinessProbe = tc.probe
		readyCondition(vmi, tc.dom, tc.pod, metav1.Now())
		c, ok := vmistatus.Condition(vmi, v1.VirtualMachineInstanceReady)
		if !ok || c.Status != tc.status || c.Reason != tc.reason {
			t.Errorf("%s: Ready = %+v, want %s %q", tc.name, c, tc.status, tc.reason)
		}
	}
}

func TestPodReadyCondition(t *testing.T) {
	if podReadyCondition(nil) != nil || podReadyCondition(&corev1.Pod{}) != nil {
		t.Error("a Pod without Ready condition has one")
	}
	pod := &corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: corev1.ConditionFalse}}}}
	if c := podReadyCondition(pod); c == nil || c.Status != corev1.ConditionFalse {
		t.Errorf("podReadyCondition = %+v", c)
	}
}
