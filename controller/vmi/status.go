package vmi

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/kube/status"
	"github.com/kemu-dev/kemu/kube/vmistatus"
)

// Reasons of events, status.reason and the conditions the controller sets.
const (
	ReasonInvalidSpec  = "InvalidSpec"
	ReasonFailedCreate = "FailedCreate"
	// ReasonPVCNotFound (KubeVirt's FailedPvcNotFound): a claim the VMI
	// uses does not exist; the VM shows ErrorPvcNotFound.
	ReasonPVCNotFound = vmistatus.ReasonPVCNotFound
	// ReasonFailedDataVolumeImport (KubeVirt's): a DataVolume the VMI
	// uses is Failed; the VMI fails before its launcher Pod is created.
	ReasonFailedDataVolumeImport = vmistatus.ReasonFailedDataVolumeImport
	ReasonPodVanished            = "PodVanished"
	ReasonPodFailed              = "PodFailed"
	ReasonPodSucceeded           = "PodSucceeded"
	ReasonSuccessfulDelete       = "SuccessfulDelete"
	ReasonFailedDelete           = "FailedDelete"
)

// ConditionPodScheduled mirrors the launcher Pod's PodScheduled condition
// while it is not True (KubeVirt does the same).
const ConditionPodScheduled = v1.VirtualMachineInstanceConditionType(corev1.PodScheduled)

// ownSynchronizedReasons are the Synchronized reasons this controller sets
// and may clear (its own and podStartFailures'); the node agent's are left
// alone.
var ownSynchronizedReasons = func() map[string]bool {
	own := map[string]bool{ReasonInvalidSpec: true, ReasonFailedCreate: true, ReasonPVCNotFound: true,
		ReasonFailedDataVolumeImport: true, ReasonFailedBackendStorageCreate: true, ReasonBackendStorageNotReady: true}
	for reason := range podStartFailures {
		own[reason] = true
	}
	return own
}()

// updateStatus applies mutate to the VMI and writes the status through the
// status subresource if it changed. mutate only touches the fields the
// controller owns, so on a conflict it is applied again to the latest VMI
// (never overwriting what the node agent wrote in between). why explains a
// phase change in its event.
func (c *Controller) updateStatus(ctx context.Context, vmi *v1.VirtualMachineInstance, why string, mutate func(*v1.VirtualMachineInstance)) error {
	res, err := status.Update(ctx, c.cfg.KemuClient.KemuV1alpha1().VirtualMachineInstances(vmi.Namespace), vmi, mutate)
	if err != nil || !res.Written {
		return err
	}
	c.written.Record(vmi.Namespace+"/"+vmi.Name, res.Before.ResourceVersion)
	for _, cond := range problemEvents(res.Before, res.After) {
		c.cfg.Recorder.Event(res.After, corev1.EventTypeWarning, cond.Reason, cond.Message)
	}
	if from, to := res.Before.Status.Phase, res.After.Status.Phase; from != to {
		typ := corev1.EventTypeNormal
		if to == v1.Failed {
			typ = corev1.EventTypeWarning
		}
		c.cfg.Recorder.Eventf(res.After, typ, string(to), "%s → %s: %s", phaseName(from), to, why)
	}
	return nil
}

func phaseName(p v1.VirtualMachineInstancePhase) string {
	if p == v1.VmPhaseUnset {
		return "(new)"
	}
	return string(p)
}

// setPhase sets the phase and records when it was entered.
func setPhase(vmi *v1.VirtualMachineInstance, phase v1.VirtualMachineInstancePhase) {
	vmistatus.SetPhase(vmi, phase, metav1.Now())
}

// setCondition replaces the condition of cond's type; the transition time
// changes only with the status, so a repeated sync writes nothing.
func setCondition(vmi *v1.VirtualMachineInstance, cond v1.VirtualMachineInstanceCondition) {
	vmistatus.SetCondition(vmi, cond, metav1.Now())
}

func condSynchronized(status corev1.ConditionStatus, reason, msg string) v1.VirtualMachineInstanceCondition {
	return v1.VirtualMachineInstanceCondition{Type: v1.VirtualMachineInstanceSynchronized, Status: status, Reason: reason, Message: msg}
}

// removeOwnSynchronized drops a Synchronized condition this controller set.
func removeOwnSynchronized(vmi *v1.VirtualMachineInstance) {
	vmistatus.RemoveConditionIf(vmi, v1.VirtualMachineInstanceSynchronized, func(c v1.VirtualMachineInstanceCondition) bool {
		return ownSynchronizedReasons[c.Reason]
	})
}

// mirrorPodConditions: PodScheduled while the Pod is not scheduled (with
// the scheduler's reason and message), Synchronized False while a container
// cannot start (podStartFailure: the kubelet's waiting reason and message).
func mirrorPodConditions(vmi *v1.VirtualMachineInstance, pod *corev1.Pod) {
	var sched *corev1.PodCondition
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodScheduled {
			sched = &pod.Status.Conditions[i]
		}
	}
	if sched != nil && sched.Status != corev1.ConditionTrue && pod.Spec.NodeName == "" {
		setCondition(vmi, v1.VirtualMachineInstanceCondition{Type: ConditionPodScheduled, Status: sched.Status,
			Reason: sched.Reason, Message: truncate(sched.Message, maxStartMessage)})
	} else {
		vmistatus.RemoveCondition(vmi, ConditionPodScheduled)
	}
	if p, ok := podStartFailure(pod); ok {
		setCondition(vmi, condSynchronized(corev1.ConditionFalse, p.reason, p.msg))
	} else {
		removeOwnSynchronized(vmi)
	}
}

// problemEvents are the Warning events due when a write changed the
// VMI's PodScheduled condition to not True, or its Synchronized condition
// to False with a launcher Pod start failure (a new reason or message):
// the condition's reason and message, once per change (a repeated sync
// writes nothing and so records nothing; a restarted controller finds the
// condition already written).
func problemEvents(before, after *v1.VirtualMachineInstance) []v1.VirtualMachineInstanceCondition {
	var out []v1.VirtualMachineInstanceCondition
	for _, typ := range []v1.VirtualMachineInstanceConditionType{ConditionPodScheduled, v1.VirtualMachineInstanceSynchronized} {
		c, ok := vmistatus.Condition(after, typ)
		if !ok || c.Status == corev1.ConditionTrue || c.Reason == "" {
			continue
		}
		if typ == v1.VirtualMachineInstanceSynchronized && podStartFailures[c.Reason] == 0 {
			continue // the controller's other reasons have their own events
		}
		if old, had := vmistatus.Condition(before, typ); had && old.Status == c.Status && old.Reason == c.Reason && old.Message == c.Message {
			continue
		}
		out = append(out, c)
	}
	return out
}

// vmiPodFailure explains the failed launcher Pod of vmi: podFailure,
// except that a compute container that exited launcherpod.ExitStopped (the
// host stopped the VM: kemu-launcher got a signal the node agent did not
// ask for) while neither the VMI nor the Pod is being deleted is the
// kubelet's own stop, explained as the node agent does
// (vmistatus.KubeletStop: a failed livenessProbe, an eviction, ...).
func vmiPodFailure(vmi *v1.VirtualMachineInstance, pod *corev1.Pod) (reason, msg string) {
	if !vmistatus.Deleting(vmi, pod) {
		for _, cs := range pod.Status.ContainerStatuses {
			if t := cs.State.Terminated; cs.Name == launcherpod.ComputeContainer && t != nil && t.ExitCode == launcherpod.ExitStopped {
				return vmistatus.KubeletStop(vmi, pod, fmt.Sprintf("the launcher exited %d (the host stopped the VM)", t.ExitCode))
			}
		}
	}
	return podFailure(pod)
}

// podFailure explains a failed Pod: the Pod's own reason (Evicted, ...),
// else why Kubernetes disrupted it (its DisruptionTarget condition:
// DeletionByTaintManager, DeletionByPodGC, ... — a Pod of a failed node),
// else the first container that ended badly (OOMKilled, Error, ...).
func podFailure(pod *corev1.Pod) (reason, msg string) {
	if pod.Status.Reason != "" {
		return pod.Status.Reason, fmt.Sprintf("launcher Pod %s failed: %s", pod.Name, pod.Status.Message)
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason != "" {
			return c.Reason, fmt.Sprintf("launcher Pod %s failed: %s", pod.Name, c.Message)
		}
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
