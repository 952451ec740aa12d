package vmi

import (
	"fmt"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
)

// maxStartMessage bounds the message a start failure puts into the VMI's
// condition and event: it quotes the image reference and the kubelet's
// message, and the image comes from whoever created the VMI.
const maxStartMessage = 1024

// Container waiting reasons of a launcher Pod that cannot start, as the
// kubelet spells them (k8s.io/kubernetes pkg/kubelet/images and
// kuberuntime; KubeVirt's virt-controller mirrors the image ones).
const (
	WaitingErrImagePull               = "ErrImagePull"
	WaitingImagePullBackOff           = "ImagePullBackOff"
	WaitingInvalidImageName           = "InvalidImageName"
	WaitingErrImageNeverPull          = "ErrImageNeverPull"
	WaitingRegistryUnavailable        = "RegistryUnavailable"
	WaitingCreateContainerConfigError = "CreateContainerConfigError"
	WaitingCreateContainerError       = "CreateContainerError"
	WaitingCrashLoopBackOff           = "CrashLoopBackOff"
)

// startFailure says what a waiting reason means for the VMI.
type startFailure int

const (
	// transient: the kubelet keeps retrying; the VMI shows it (Synchronized
	// False and a Warning event) until it clears.
	transient startFailure = iota + 1
	// permanent: no retry can help (the image reference itself is refused,
	// or imagePullPolicy Never with no image on the node): the VMI fails
	// with the reason.
	permanent
)

// podStartFailures are the waiting reasons the controller surfaces on the
// VMI. A launcher Pod's restartPolicy is Never, so a crashing init
// container fails the Pod (podFailure) rather than looping; CrashLoopBackOff
// is kept for restartable (sidecar) init containers.
var podStartFailures = map[string]startFailure{
	WaitingErrImagePull:               transient,
	WaitingImagePullBackOff:           transient,
	WaitingRegistryUnavailable:        transient,
	WaitingCreateContainerConfigError: transient,
	WaitingCreateContainerError:       transient,
	WaitingCrashLoopBackOff:           transient,
	WaitingInvalidImageName:           permanent,
	WaitingErrImageNeverPull:          permanent,
}

// podStartProblem is the first container (init containers first, in
// order) of pod waiting for a reason of podStartFailures: the reason, a
// message naming the container and its image with the kubelet's message,
// and whether it is permanent.
type podStartProblem struct {
	reason, msg string
	permanent   bool
}

func podStartFailure(pod *corev1.Pod) (podStartProblem, bool) {
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range list {
			w := cs.State.Waiting
			if w == nil {
				continue
			}
			kind, ok := podStartFailures[w.Reason]
			if !ok {
				continue
			}
			msg := fmt.Sprintf("launcher Pod %s: container %s (image %s): %s", pod.Name, cs.Name, cs.Image, w.Reason)
			if w.Message != "" {
				msg += ": " + w.Message
			}
			return podStartProblem{reason: w.Reason, msg: truncate(msg, maxStartMessage), permanent: kind == permanent}, true
		}
	}
	return podStartProblem{}, false
}

// truncate cuts s to at most n bytes on a UTF-8 boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	i := n - len(mark)
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + mark
}
