package node

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestHeartbeatOf(t *testing.T) {
	node := func(hb string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{v1.NodeHeartbeatAnnotation: hb}}}
	}
	for _, c := range []struct {
		name               string
		node               *corev1.Node
		kemu, valid, stale bool
		left               time.Duration
	}{
		{"no annotation", &corev1.Node{}, false, false, false, 0},
		{"garbage", node("yesterday"), true, false, false, 0},
		{"fresh", node(t0.Add(-time.Minute).Format(time.RFC3339)), true, true, false, 4 * time.Minute},
		{"just at the limit", node(t0.Add(-5 * time.Minute).Format(time.RFC3339)), true, true, false, 0},
		{"stale", node(t0.Add(-5*time.Minute - time.Second).Format(time.RFC3339)), true, true, true, 0},
		{"from the future", node(t0.Add(time.Hour).Format(time.RFC3339)), true, true, false, 5 * time.Minute},
	} {
		hb := heartbeatOf(c.node, t0, 5*time.Minute)
		if hb.kemu != c.kemu || hb.valid != c.valid || hb.stale != c.stale || hb.left != c.left {
			t.Errorf("%s: %+v", c.name, hb)
		}
	}
}

func TestPodAliveAndLauncherOf(t *testing.T) {
	terminated := corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}}
	running := corev1.ContainerStatus{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	for _, c := range []struct {
		name  string
		pod   corev1.Pod
		alive bool
	}{
		{"pending", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}}, true},
		{"running", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{running, terminated}}}, true},
		{"all containers terminated", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{terminated}}}, false},
		{"failed", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed}}, false},
		{"succeeded", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}, false},
	} {
		if got := podAlive(&c.pod); got != c.alive {
			t.Errorf("%s: alive %v", c.name, got)
		}
	}

	vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm", UID: "vmi-uid"}}
	vmi.Status.ActivePods = map[types.UID]string{"active": "n1"}
	vmi.Status.LauncherPod = "launcher-abc"
	yes := true
	for _, c := range []struct {
		name string
		pod  corev1.Pod
		want bool
	}{
		{"controlled", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "x",
			OwnerReferences: []metav1.OwnerReference{{UID: "vmi-uid", Controller: &yes}}}}, true},
		{"active pod", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "y", UID: "active"}}, true},
		{"launcherPod", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "launcher-abc"}}, true},
		{"other namespace", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "launcher-abc"}}, false},
		{"unrelated", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "z",
			OwnerReferences: []metav1.OwnerReference{{UID: "else", Controller: &yes}}}}, false},
	} {
		if got := launcherOf(&c.pod, vmi); got != c.want {
			t.Errorf("%s: %v", c.name, got)
		}
	}
}

func TestMarkFailed(t *testing.T) {
	vmi := &v1.VirtualMachineInstance{}
	vmi.Status.Phase = v1.Running
	vmi.Status.Conditions = []v1.VirtualMachineInstanceCondition{
		{Type: v1.VirtualMachineInstanceReady, Status: corev1.ConditionTrue},
		{Type: v1.VirtualMachineInstanceAgentConnected, Status: corev1.ConditionTrue}}
	markFailed(vmi, "gone", metav1.NewTime(t0))
	st := vmi.Status
	if st.Phase != v1.Failed || st.Reason != ReasonNodeUnresponsive || len(st.PhaseTransitionTimestamps) != 1 ||
		st.PhaseTransitionTimestamps[0].Phase != v1.Failed || len(st.Conditions) != 2 ||
		st.Conditions[0].Status != corev1.ConditionFalse || st.Conditions[0].Reason != ReasonNodeUnresponsive {
		t.Errorf("%+v", st)
	}
}
