//go:build cluster

package vmi

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// TestPodStartFailures: a launcher Pod that cannot start surfaces on its
// VMI at once, as a condition and a Warning event with the kubelet's (or
// the scheduler's) reason and message. The test plays the scheduler and the
// kubelet (this package's control plane has neither): it writes the Pod
// status a kubelet writes for each case. A refused image reference
// (InvalidImageName) fails the VMI and its Pod is deleted; a pull error
// (ErrImagePull, then ImagePullBackOff) and a container config error stay
// visible until they clear; an unschedulable Pod (no devices.kemu.dev/kvm
// left) shows the scheduler's message.
func TestPodStartFailures(t *testing.T) {
	ns := newNamespace(t, "podstart")
	startController(t, ns, nil)
	for _, name := range []string{"invalid", "pull", "unsched"} {
		createVMI(t, ns, newVMI(name))
	}
	scheduled := func(name string) *v1.VirtualMachineInstance {
		vmi := waitVMI(t, ns, name, "Scheduling", func(v *v1.VirtualMachineInstance) bool { return v.Status.Phase == v1.Scheduling })
		bind(t, podOf(t, vmi))
		return waitVMI(t, ns, name, "Scheduled", func(v *v1.VirtualMachineInstance) bool { return v.Status.Phase == v1.Scheduled })
	}
	syncedFalse := func(name, reason, contains string) func(*v1.VirtualMachineInstance) bool {
		return func(v *v1.VirtualMachineInstance) bool {
			c := condition(v, v1.VirtualMachineInstanceSynchronized)
			return c != nil && c.Status == corev1.ConditionFalse && c.Reason == reason && strings.Contains(c.Message, contains)
		}
	}

	// InvalidImageName (what the kubelet reports for a reference that does
	// not parse, such as an upper-case repository; api/validation refuses
	// only white space and control characters): Failed with the reason
	// within a sync, and the Pod goes.
	const badImage = "kemu.local/BadName:latest"
	const parseErr = `Failed to apply default image tag "kemu.local/BadName:latest": couldn't parse image name ` +
		`"kemu.local/BadName:latest": invalid reference format: repository name (BadName) must be lowercase`
	vmi := scheduled("invalid")
	pod := vmi.Status.LauncherPod
	setPodStatus(t, ns, pod, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodPending
		s.InitContainerStatuses = []corev1.ContainerStatus{waiting("container-disk-0", badImage, WaitingInvalidImageName, parseErr)}
	})
	vmi = waitVMI(t, ns, "invalid", "Failed", func(v *v1.VirtualMachineInstance) bool { return v.Status.Phase == v1.Failed })
	if vmi.Status.Reason != WaitingInvalidImageName || !syncedFalse("invalid", WaitingInvalidImageName, "invalid reference format")(vmi) {
		t.Errorf("reason %q conditions %+v", vmi.Status.Reason, vmi.Status.Conditions)
	}
	waitEvent(t, ns, "invalid", WaitingInvalidImageName, badImage)
	waitEvent(t, ns, "invalid", "Failed", WaitingInvalidImageName)
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, pollTimeout, true,
		func(ctx context.Context) (bool, error) {
			p, err := admin.kube.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
			return apierrors.IsNotFound(err) || (err == nil && p.DeletionTimestamp != nil), nil
		})
	if err != nil {
		t.Errorf("the Pod of the failed VMI is not being deleted: %v", err)
	}

	// ErrImagePull → ImagePullBackOff → a config error → running: each
	// shows (condition and event), the VMI stays Scheduled, and the
	// condition clears.
	vmi = scheduled("pull")
	pod = vmi.Status.LauncherPod
	const image = "registry.invalid/disk:1"
	for _, step := range []struct {
		init     bool
		reason   string
		message  string
		contains string
	}{
		{true, WaitingErrImagePull, `failed to pull and unpack image "registry.invalid/disk:1": dial tcp: lookup registry.invalid: no such host`, "no such host"},
		{true, WaitingImagePullBackOff, `Back-off pulling image "registry.invalid/disk:1"`, "Back-off pulling"},
		{false, WaitingCreateContainerConfigError, `secret "missing" not found`, `secret "missing" not found`},
	} {
		setPodStatus(t, ns, pod, func(s *corev1.PodStatus) {
			s.Phase = corev1.PodPending
			s.InitContainerStatuses, s.ContainerStatuses = nil, nil
			if step.init {
				s.InitContainerStatuses = []corev1.ContainerStatus{waiting("container-disk-0", image, step.reason, step.message)}
			} else {
				s.ContainerStatuses = []corev1.ContainerStatus{waiting("compute", launcherImage, step.reason, step.message)}
			}
		})
		waitVMI(t, ns, "pull", "Synchronized False "+step.reason, syncedFalse("pull", step.reason, step.contains))
		waitEvent(t, ns, "pull", step.reason, step.contains)
	}
	vmi = waitVMI(t, ns, "pull", "fresh", func(*v1.VirtualMachineInstance) bool { return true })
	if vmi.Status.Phase != v1.Scheduled {
		t.Errorf("phase %s with a transient start failure, want Scheduled", vmi.Status.Phase)
	}
	setPodStatus(t, ns, pod, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodRunning
		s.InitContainerStatuses = nil
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: "compute", Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
	})
	waitVMI(t, ns, "pull", "start failure cleared", func(v *v1.VirtualMachineInstance) bool {
		return condition(v, v1.VirtualMachineInstanceSynchronized) == nil && v.Status.Phase == v1.Scheduled
	})

	// Unschedulable for lack of devices.kemu.dev/kvm: the scheduler's
	// message on the VMI and in a Warning event.
	vmi = waitVMI(t, ns, "unsched", "Scheduling", func(v *v1.VirtualMachineInstance) bool { return v.Status.Phase == v1.Scheduling })
	const unsched = "0/3 nodes are available: 3 Insufficient devices.kemu.dev/kvm. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
	setPodStatus(t, ns, vmi.Status.LauncherPod, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodPending
		s.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: unsched, LastTransitionTime: metav1.Now()}}
	})
	waitVMI(t, ns, "unsched", "PodScheduled False", func(v *v1.VirtualMachineInstance) bool {
		c := condition(v, ConditionPodScheduled)
		return c != nil && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable && c.Message == unsched &&
			v.Status.Phase == v1.Scheduling
	})
	waitEvent(t, ns, "unsched", corev1.PodReasonUnschedulable, "Insufficient devices.kemu.dev/kvm")
}
