package vmistatus

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

func TestKubeletStop(t *testing.T) {
	now := metav1.Now()
	plain := &v1.VirtualMachineInstance{Status: v1.VirtualMachineInstanceStatus{LauncherPod: "virt-launcher-a"}}
	live := plain.DeepCopy()
	live.Spec.LivenessProbe = &v1.Probe{}
	pod := func(mut func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "virt-launcher-b"}}
		if mut != nil {
			mut(p)
		}
		return p
	}
	evicted := pod(func(p *corev1.Pod) {
		p.Status.Reason, p.Status.Message = "Evicted", "The node was low on resource: memory."
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "TerminationByKubelet"}}
	})
	disrupted := pod(func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "x"},
			{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "TerminationByKubelet", Message: "node shutdown"}}
	})
	notDisrupted := pod(func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionFalse, Reason: "Gone"}}
	})
	for _, tt := range []struct {
		name      string
		vmi       *v1.VirtualMachineInstance
		pod       *corev1.Pod
		reason    string
		msgHas    []string
		msgHasNot string
	}{
		{"liveness: the Pod says nothing", live, pod(nil), ReasonLivenessProbeFailed,
			[]string{"the launcher got SIGTERM while neither the VMI nor its launcher Pod virt-launcher-b was being deleted", "livenessProbe failed"}, ""},
		{"liveness, no Pod known", live, nil, ReasonLivenessProbeFailed, []string{"launcher Pod virt-launcher-a"}, ""},
		{"eviction: the Pod's reason first", live, evicted, "Evicted", []string{"the Pod Evicted: The node was low on resource: memory."}, "livenessProbe"},
		{"the Pod's DisruptionTarget", plain, disrupted, "TerminationByKubelet", []string{"DisruptionTarget TerminationByKubelet: node shutdown"}, ""},
		{"a DisruptionTarget not True is no cause", plain, notDisrupted, ReasonLauncherTerminated, []string{"no livenessProbe"}, "Gone"},
		{"nothing explains it", plain, pod(nil), ReasonLauncherTerminated, []string{"no livenessProbe"}, ""},
		{"a long Pod message is cut", plain, pod(func(p *corev1.Pod) { p.Status.Reason, p.Status.Message = "Evicted", strings.Repeat("é", 600) }),
			"Evicted", []string{"é…"}, strings.Repeat("é", 300)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			reason, msg := KubeletStop(tt.vmi, tt.pod, "the launcher got SIGTERM")
			if reason != tt.reason {
				t.Errorf("reason %q, want %q (%s)", reason, tt.reason, msg)
			}
			for _, s := range tt.msgHas {
				if !strings.Contains(msg, s) {
					t.Errorf("message %q lacks %q", msg, s)
				}
			}
			if tt.msgHasNot != "" && strings.Contains(msg, tt.msgHasNot) {
				t.Errorf("message %q has %q", msg, tt.msgHasNot)
			}
			if len(msg) > 1024 {
				t.Errorf("message of %d bytes", len(msg))
			}
		})
	}
	deleted := plain.DeepCopy()
	deleted.DeletionTimestamp = &now
	for _, tt := range []struct {
		name string
		vmi  *v1.VirtualMachineInstance
		pod  *corev1.Pod
		want bool
	}{
		{"neither", plain, pod(nil), false},
		{"no Pod", plain, nil, false},
		{"the VMI", deleted, pod(nil), true},
		{"the Pod", plain, pod(func(p *corev1.Pod) { p.DeletionTimestamp = &now }), true},
	} {
		if got := Deleting(tt.vmi, tt.pod); got != tt.want {
			t.Errorf("Deleting (%s) = %v, want %v", tt.name, got, tt.want)
		}
	}
}
