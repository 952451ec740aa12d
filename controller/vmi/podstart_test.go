package vmi

import (
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

func waiting(name, image, reason, msg string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, Image: image, State: corev1.ContainerState{
		Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}
}

func TestPodStartFailure(t *testing.T) {
	running := corev1.ContainerStatus{Name: "compute", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	for _, tc := range []struct {
		name          string
		init, main    []corev1.ContainerStatus
		wantOK        bool
		wantReason    string
		wantPermanent bool
		wantInMsg     []string
	}{
		{"invalid image name: permanent", []corev1.ContainerStatus{waiting("container-disk-0", "kemu.local/BadName:latest", WaitingInvalidImageName,
			`Failed to apply default image tag "kemu.local/BadName:latest": couldn't parse image name`)}, nil,
			true, WaitingInvalidImageName, true, []string{"container-disk-0", "kemu.local/BadName:latest", "couldn't parse"}},
		{"never pull: permanent", nil, []corev1.ContainerStatus{waiting("compute", "img", WaitingErrImageNeverPull, "not present")},
			true, WaitingErrImageNeverPull, true, []string{"compute", "not present"}},
		{"pull error: transient", []corev1.ContainerStatus{waiting("container-disk-0", "img", WaitingErrImagePull, "manifest unknown")}, nil,
			true, WaitingErrImagePull, false, []string{"manifest unknown"}},
		{"back-off: transient", []corev1.ContainerStatus{waiting("container-disk-0", "img", WaitingImagePullBackOff, "Back-off pulling image")}, nil,
			true, WaitingImagePullBackOff, false, []string{"Back-off"}},
		{"registry unavailable: transient", nil, []corev1.ContainerStatus{waiting("compute", "img", WaitingRegistryUnavailable, "")},
			true, WaitingRegistryUnavailable, false, []string{"RegistryUnavailable"}},
		{"config error: transient", nil, []corev1.ContainerStatus{waiting("compute", "img", WaitingCreateContainerConfigError, `secret "x" not found`)},
			true, WaitingCreateContainerConfigError, false, []string{`secret "x" not found`}},
		{"create error: transient", nil, []corev1.ContainerStatus{waiting("compute", "img", WaitingCreateContainerError, "no such device")},
			true, WaitingCreateContainerError, false, []string{"no such device"}},
		{"init crash loop: transient", []corev1.ContainerStatus{waiting("sidecar", "img", WaitingCrashLoopBackOff, "back-off 10s")}, nil,
			true, WaitingCrashLoopBackOff, false, []string{"sidecar"}},
		{"init containers first", []corev1.ContainerStatus{waiting("container-disk-0", "img", WaitingImagePullBackOff, "")},
			[]corev1.ContainerStatus{waiting("compute", "img", WaitingInvalidImageName, "")},
			true, WaitingImagePullBackOff, false, nil},
		{"a normal wait is no failure", []corev1.ContainerStatus{waiting("container-disk-0", "img", "PodInitializing", "")},
			[]corev1.ContainerStatus{running}, false, "", false, nil},
		{"nothing waiting", nil, []corev1.ContainerStatus{running}, false, "", false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kemu-launcher-x"},
				Status: corev1.PodStatus{InitContainerStatuses: tc.init, ContainerStatuses: tc.main}}
			p, ok := podStartFailure(pod)
			if ok != tc.wantOK || p.reason != tc.wantReason || p.permanent != tc.wantPermanent {
				t.Fatalf("podStartFailure = %+v, %v; want %q permanent %v, %v", p, ok, tc.wantReason, tc.wantPermanent, tc.wantOK)
			}
			for _, s := range append(tc.wantInMsg, "kemu-launcher-x") {
				if ok && !strings.Contains(p.msg, s) {
					t.Errorf("message %q lacks %q", p.msg, s)
				}
			}
		})
	}
}

// The message quotes the (untrusted) image reference: bounded.
func TestPodStartFailureMessageBounded(t *testing.T) {
	long := strings.Repeat("é", 5000)
	pod := &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{
		waiting("compute", long, WaitingInvalidImageName, long)}}}
	p, _ := podStartFailure(pod)
	if len(p.msg) > maxStartMessage || !utf8.ValidString(p.msg) || !strings.HasSuffix(p.msg, "…") {
		t.Errorf("message of %d bytes (valid UTF-8 %v)", len(p.msg), utf8.ValidString(p.msg))
	}
}

func TestProblemEvents(t *testing.T) {
	cond := func(typ v1.VirtualMachineInstanceConditionType, status corev1.ConditionStatus, reason, msg string) v1.VirtualMachineInstanceCondition {
		return v1.VirtualMachineInstanceCondition{Type: typ, Status: status, Reason: reason, Message: msg}
	}
	vmi := func(conds ...v1.VirtualMachineInstanceCondition) *v1.VirtualMachineInstance {
		return &v1.VirtualMachineInstance{Status: v1.VirtualMachineInstanceStatus{Conditions: conds}}
	}
	unsched := cond(ConditionPodScheduled, corev1.ConditionFalse, corev1.PodReasonUnschedulable, "0/1 nodes: Insufficient devices.kemu.dev/kvm")
	pull := cond(v1.VirtualMachineInstanceSynchronized, corev1.ConditionFalse, WaitingErrImagePull, "manifest unknown")
	backoff := cond(v1.VirtualMachineInstanceSynchronized, corev1.ConditionFalse, WaitingImagePullBackOff, "Back-off")
	for _, tc := range []struct {
		name          string
		before, after *v1.VirtualMachineInstance
		want          []string
	}{
		{"unschedulable appears", vmi(), vmi(unsched), []string{"Unschedulable"}},
		{"unschedulable unchanged", vmi(unsched), vmi(unsched), nil},
		{"the scheduler's message changes", vmi(unsched),
			vmi(cond(ConditionPodScheduled, corev1.ConditionFalse, corev1.PodReasonUnschedulable, "0/2 nodes")), []string{"Unschedulable"}},
		{"pull error appears", vmi(), vmi(pull), []string{WaitingErrImagePull}},
		{"pull error → back-off", vmi(pull), vmi(backoff), []string{WaitingImagePullBackOff}},
		{"both at once", vmi(), vmi(unsched, pull), []string{"Unschedulable", WaitingErrImagePull}},
		{"cleared: no event", vmi(pull), vmi(), nil},
		{"another Synchronized reason: its own event", vmi(),
			vmi(cond(v1.VirtualMachineInstanceSynchronized, corev1.ConditionFalse, ReasonInvalidSpec, "x")), nil},
		{"Synchronized True (the node agent's)", vmi(pull),
			vmi(cond(v1.VirtualMachineInstanceSynchronized, corev1.ConditionTrue, "Synced", "")), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, c := range problemEvents(tc.before, tc.after) {
				got = append(got, c.Reason)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("events %v, want %v", got, tc.want)
			}
		})
	}
}
