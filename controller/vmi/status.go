package vmi

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// Reasons of events, status.reason and the conditions the controller sets.
const (
	ReasonInvalidSpec      = "InvalidSpec"
	ReasonFailedCreate     = "FailedCreate"
	ReasonPVCNotFound      = "PVCNotFound"
	ReasonPodVanished      = "PodVanished"
	ReasonPodFailed        = "PodFailed"
	ReasonPodSucceeded     = "PodSucceeded"
	ReasonSuccessfulDelete = "SuccessfulDelete"
	ReasonFailedDelete     = "FailedDelete"
)

// ConditionPodScheduled mirrors the launcher Pod's PodScheduled condition
// while it is not True (KubeVirt does the same).
const ConditionPodScheduled = v1.VirtualMachineInstanceConditionType(corev1.PodScheduled)

// imageErrors are the container waiting reasons surfaced as Synchronized
// False while the VMI waits (the kubelet keeps retrying them).
var imageErrors = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true,
	"ErrImageNeverPull": true, "RegistryUnavailable": true,
}

// ownSynchronizedReasons are the Synchronized reasons this controller sets
// and may clear; the node agent's are left alone.
var ownSynchronizedReasons = map[string]bool{
	ReasonInvalidSpec: true, ReasonFailedCreate: true, ReasonPVCNotFound: true,
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true,
	"ErrImageNeverPull": true, "RegistryUnavailable": true,
}

// updateStatus applies mutate to the VMI and writes the status through the
// status subresource if it changed. mutate only touches the fields the
// controller owns, so on a conflict it is applied again to a fresh copy
// (never overwriting what the node agent wrote in between). why explains a
// phase change in its event.
func (c *Controller) updateStatus(ctx context.Context, vmi *v1.VirtualMachineInstance, why string, mutate func(*v1.VirtualMachineInstance)) error {
	client := c.cfg.KemuClient.KemuV1alpha1().VirtualMachineInstances(vmi.Namespace)
	cur := vmi.DeepCopy()
	for attempt := 0; ; attempt++ {
		before := cur.Status.DeepCopy()
		mutate(cur)
		if equality.Semantic.DeepEqual(before, &cur.Status) {
			return nil
		}
		_, err := client.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		if err == nil {
			c.written.Store(cur.Namespace+"/"+cur.Name, cur.ResourceVersion)
			if before.Phase != cur.Status.Phase {
				typ := corev1.EventTypeNormal
				if cur.Status.Phase == v1.Failed {
					typ = corev1.EventTypeWarning
				}
				c.cfg.Recorder.Eventf(cur, typ, string(cur.Status.Phase), "%s → %s: %s",
					phaseName(before.Phase), cur.Status.Phase, why)
			}
			return nil
		}
		if !apierrors.IsConflict(err) || attempt >= 4 {
			return fmt.Errorf("updating the status of %s/%s: %w", vmi.Namespace, vmi.Name, err)
		}
		fresh, gerr := client.Get(ctx, vmi.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(gerr) {
			return nil
		}
		if gerr != nil {
			return gerr
		}
		cur = fresh
	}
}

func phaseName(p v1.VirtualMachineInstancePhase) string {
	if p == v1.VmPhaseUnset {
		return "(new)"
	}
	return string(p)
}

// setPhase sets the phase and records when it was entered.
func setPhase(vmi *v1.VirtualMachineInstance, phase v1.VirtualMachineInstancePhase) {
	if vmi.Status.Phase == phase {
		return
	}
	vmi.Status.Phase = phase
	vmi.Status.PhaseTransitionTimestamps = append(vmi.Status.PhaseTransitionTimestamps,
		v1.VirtualMachineInstancePhaseTransitionTimestamp{Phase: phase, PhaseTransitionTimestamp: metav1.Now()})
}

func condSynchronized(status corev1.ConditionStatus, reason, msg string) v1.VirtualMachineInstanceCondition {
	return v1.VirtualMachineInstanceCondition{Type: v1.VirtualMachineInstanceSynchronized, Status: status, Reason: reason, Message: msg}
}

// setCondition replaces the condition of cond's type; the transition time
// changes only with the status, so a repeated sync writes nothing.
func setCondition(vmi *v1.VirtualMachineInstance, cond v1.VirtualMachineInstanceCondition) {
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
			cond.LastTransitionTime = metav1.Now()
		}
		cond.LastProbeTime = metav1.Now()
		*old = cond
		return
	}
	cond.LastTransitionTime, cond.LastProbeTime = metav1.Now(), metav1.Now()
	vmi.Status.Conditions = append(vmi.Status.Conditions, cond)
}

func removeCondition(vmi *v1.VirtualMachineInstance, typ v1.VirtualMachineInstanceConditionType, keep func(v1.VirtualMachineInstanceCondition) bool) {
	out := vmi.Status.Conditions[:0:0]
	for _, c := range vmi.Status.Conditions {
		if c.Type != typ || (keep != nil && keep(c)) {
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

// removeOwnSynchronized drops a Synchronized condition this controller set.
func removeOwnSynchronized(vmi *v1.VirtualMachineInstance) {
	removeCondition(vmi, v1.VirtualMachineInstanceSynchronized, func(c v1.VirtualMachineInstanceCondition) bool {
		return !ownSynchronizedReasons[c.Reason]
	})
}

// mirrorPodConditions: PodScheduled while the Pod is not scheduled (with
// the scheduler's reason and message), Synchronized False while a container
// image cannot be pulled.
func mirrorPodConditions(vmi *v1.VirtualMachineInstance, pod *corev1.Pod) {
	var sched *corev1.PodCondition
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodScheduled {
			sched = &pod.Status.Conditions[i]
		}
	}
	if sched != nil && sched.Status != corev1.ConditionTrue && pod.Spec.NodeName == "" {
		setCondition(vmi, v1.VirtualMachineInstanceCondition{Type: ConditionPodScheduled, Status: sched.Status,
			Reason: sched.Reason, Message: sched.Message})
	} else {
		removeCondition(vmi, ConditionPodScheduled, nil)
	}
	if reason, msg, ok := podImageError(pod); ok {
		setCondition(vmi, condSynchronized(corev1.ConditionFalse, reason, msg))
	} else {
		removeOwnSynchronized(vmi)
	}
}

// podImageError reports a container (init or not) waiting for its image.
func podImageError(pod *corev1.Pod) (reason, msg string, ok bool) {
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range list {
			if w := cs.State.Waiting; w != nil && imageErrors[w.Reason] {
				return w.Reason, fmt.Sprintf("container %s (image %s): %s", cs.Name, cs.Image, w.Message), true
			}
		}
	}
	return "", "", false
}

// podFailure explains a failed Pod: the Pod's own reason (Evicted, ...),
// else the first container that ended badly (OOMKilled, Error, ...).
func podFailure(pod *corev1.Pod) (reason, msg string) {
	if pod.Status.Reason != "" {
		return pod.Status.Reason, fmt.Sprintf("launcher Pod %s failed: %s", pod.Name, pod.Status.Message)
	}
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range list {
			t := cs.State.Terminated
			if t == nil || (t.ExitCode == 0 && t.Reason != "OOMKilled") {
				continue
			}
			reason = t.Reason
			if reason == "" {
				reason = ReasonPodFailed
			}
			msg = fmt.Sprintf("launcher Pod %s: container %s terminated: %s (exit code %d)", pod.Name, cs.Name, t.Reason, t.ExitCode)
			if t.Message != "" {
				msg += ": " + t.Message
			}
			return reason, msg
		}
	}
	return ReasonPodFailed, fmt.Sprintf("launcher Pod %s failed", pod.Name)
}
