package vmistatus

import (
	"fmt"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// Reasons a VMI fails with when the kubelet stopped its launcher on its own:
// neither the VMI nor its launcher Pod was being deleted (issue 23). The
// node agent writes them from the launcher's domain (its stopSignal), the
// VMI controller from the launcher Pod's end when it sees it first. kemu's
// own: KubeVirt ends such a VMI Succeeded when its guest obeys the power
// button, so runStrategy RerunOnFailure does not restart it.
const (
	// ReasonLivenessProbeFailed: the VMI has a livenessProbe and the Pod
	// names no other cause: the kubelet's liveness kill (the launcher Pod's
	// Unhealthy events carry the probe's output).
	ReasonLivenessProbeFailed = "LivenessProbeFailed"
	// ReasonLauncherTerminated: stopped by a signal nobody explains (no
	// livenessProbe, no Pod reason): by hand, or a runtime's restart.
	ReasonLauncherTerminated = "LauncherTerminated"
)

// maxStopMessage bounds what KubeletStop quotes from the Pod.
const maxStopMessage = 512

// Deleting says whether the VMI or its launcher Pod (nil: none known) is
// being deleted: a stop asked through the API, which ends the VMI as its
// guest ends (Succeeded when it powered off).
func Deleting(vmi *v1.VirtualMachineInstance, pod *corev1.Pod) bool {
	return vmi.DeletionTimestamp != nil || (pod != nil && pod.DeletionTimestamp != nil)
}

// KubeletStop explains a launcher the kubelet stopped while neither vmi
// nor its launcher Pod (nil: not known) was being deleted; what says what
// was seen (the signal, the exit status). The cause is, first that fits:
// the Pod's own reason (Evicted, or Terminated for a node shutdown), its
// DisruptionTarget condition's reason (TerminationByKubelet, ...), a failed
// livenessProbe when the VMI has one (the only stop the kubelet makes on
// its own in a launcher Pod, restartPolicy Never, that leaves nothing in
// the Pod's status), else LauncherTerminated.
func KubeletStop(vmi *v1.VirtualMachineInstance, pod *corev1.Pod, what string) (reason, msg string) {
	podName := vmi.Status.LauncherPod
	if pod != nil {
		podName = pod.Name
	}
	prefix := fmt.Sprintf("%s while neither the VMI nor its launcher Pod %s was being deleted: ", what, podName)
	if pod != nil && pod.Status.Reason != "" {
		return pod.Status.Reason, prefix + "the Pod " + pod.Status.Reason + ": " + bound(pod.Status.Message)
	}
	if pod != nil {
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason != "" {
				return c.Reason, prefix + "the Pod's DisruptionTarget " + c.Reason + ": " + bound(c.Message)
			}
		}
	}
	if vmi.Spec.LivenessProbe != nil {
		return ReasonLivenessProbeFailed, prefix + "the livenessProbe failed (the launcher Pod's Unhealthy events say how)"
	}
	return ReasonLauncherTerminated, prefix + "the VMI has no livenessProbe and the Pod names no cause"
}

// bound cuts s to maxStopMessage bytes on a UTF-8 boundary.
func bound(s string) string {
	if len(s) <= maxStopMessage {
		return s
	}
	i := maxStopMessage
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}
