package vmi

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/kube/vmistatus"
)

func TestPodFailure(t *testing.T) {
	terminated := func(reason string, code int32) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: "compute", State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{Reason: reason, ExitCode: code}}}
	}
	disrupted := corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
		Reason: "DeletionByTaintManager", Message: "Taint manager: deleting due to NoExecute taint"}
	for _, tc := range []struct {
		name       string
		status     corev1.PodStatus
		wantReason string
		wantInMsg  string
	}{
		{"the Pod's own reason", corev1.PodStatus{Reason: "Evicted", Message: "low on memory", Conditions: []corev1.PodCondition{disrupted}},
			"Evicted", "low on memory"},
		{"disrupted by Kubernetes (a failed node)", corev1.PodStatus{Conditions: []corev1.PodCondition{disrupted},
			ContainerStatuses: []corev1.ContainerStatus{terminated("Error", 137)}},
			"DeletionByTaintManager", "NoExecute taint"},
		{"a disruption condition that is not True", corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionFalse, Reason: "X"}},
			ContainerStatuses: []corev1.ContainerStatus{terminated("OOMKilled", 137)}},
			"OOMKilled", "container compute terminated"},
		{"a container's exit", corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{terminated("", 1)}},
			ReasonPodFailed, "exit code 1"},
		{"nothing known", corev1.PodStatus{}, ReasonPodFailed, "failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kemu-launcher-x"}, Status: tc.status}
			reason, msg := podFailure(pod)
			if reason != tc.wantReason || !strings.Contains(msg, tc.wantInMsg) {
				t.Errorf("podFailure = %q, %q; want %q and a message with %q", reason, msg, tc.wantReason, tc.wantInMsg)
			}
		})
	}
}

// A launcher that exited ExitStopped while neither the VMI nor its Pod was
// being deleted was stopped by the kubelet on its own: explained as the
// node agent does (vmistatus.KubeletStop); otherwise podFailure's reason.
func TestVMIPodFailure(t *testing.T) {
	now := metav1.Now()
	exited := func(name string, code int32) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: code}}}
	}
	live := &v1.VirtualMachineInstance{Spec: v1.VirtualMachineInstanceSpec{LivenessProbe: &v1.Probe{}}}
	plain := &v1.VirtualMachineInstance{}
	for _, tc := range []struct {
		name        string
		vmi         *v1.VirtualMachineInstance
		status      corev1.PodStatus
		podDeleting bool
		wantReason  string
		wantInMsg   string
	}{
		{"liveness kill", live, corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{exited("compute", launcherpod.ExitStopped)}},
			false, vmistatus.ReasonLivenessProbeFailed, "the launcher exited 3 (the host stopped the VM) while neither"},
		{"no livenessProbe", plain, corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{exited("compute", launcherpod.ExitStopped)}},
			false, vmistatus.ReasonLauncherTerminated, "no livenessProbe"},
		{"eviction", live, corev1.PodStatus{Reason: "Evicted", Message: "low on memory",
			ContainerStatuses: []corev1.ContainerStatus{exited("compute", launcherpod.ExitStopped)}}, false, "Evicted", "low on memory"},
		{"the Pod was deleted: as before", live, corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{exited("compute", launcherpod.ExitStopped)}},
			true, "Error", "exit code 3"},
		{"a crash is no stop", live, corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{exited("compute", 1)}},
			false, "Error", "exit code 1"},
		{"another container's 3", live, corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{exited("sidecar", launcherpod.ExitStopped)}},
			false, "Error", "container sidecar"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kemu-launcher-x"}, Status: tc.status}
			if tc.podDeleting {
				pod.DeletionTimestamp = &now
			}
			reason, msg := vmiPodFailure(tc.vmi, pod)
			if reason != tc.wantReason || !strings.Contains(msg, tc.wantInMsg) {
				t.Errorf("vmiPodFailure = %q, %q; want %q and a message with %q", reason, msg, tc.wantReason, tc.wantInMsg)
			}
		})
	}
}
