package vmi

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/nodeagent/launcherclient"
)

// What the node agent says about a launcher it refuses (or, after a
// refusal, accepts).
const (
	// ReasonLauncherUnverified is Ready's reason (False) on a Running VMI
	// while its launcher is refused: the VM's state is unknown.
	ReasonLauncherUnverified = "LauncherUnverified"
	// EventLauncherUnverified (Warning) is recorded on the VMI for each new
	// refusal; EventLauncherVerified (Normal) when the Pod's launcher
	// answers after one.
	EventLauncherUnverified = "LauncherUnverified"
	EventLauncherVerified   = "LauncherVerified"
	// EventHostDiskRefused (Warning): a hostDisk the launcher Pod mounted is
	// not the file beneath an allowed directory; the VM is not started.
	EventHostDiskRefused = "HostDiskRefused"
	// unverifiedRecheck × SocketPoll is how often a refused socket is
	// looked at again.
	unverifiedRecheck = 5
)

// refuse records that what is at the VMI's launcher socket did not verify
// (err wraps launcherclient.ErrUnverified). Nothing is sent to it: the VMI
// keeps its phase, gets the LauncherUnverified condition and, for each new
// refusal, a Warning event; the socket is looked at again later, since the
// Pod's real launcher may still take its place (it removes a stale
// launcher.sock when it starts). It returns when to look again.
func (c *Controller) refuse(ctx context.Context, st *launcherState, vmi *v1.VirtualMachineInstance, err error) time.Duration {
	var u *launcherclient.UnverifiedError
	if !errors.As(err, &u) {
		u = &launcherclient.UnverifiedError{Reason: ReasonLauncherUnverified, Message: err.Error()}
	}
	launcherConnects.WithLabelValues("unverified").Inc()
	if st.setRefusal(u) {
		klog.FromContext(ctx).Error(err, "Refusing the launcher: no command is sent to it", "reason", u.Reason)
		c.cfg.Recorder.Eventf(vmi, corev1.EventTypeWarning, EventLauncherUnverified,
			"Not talking to the VMI's launcher (%s): %s", u.Reason, u.Message)
	}
	return unverifiedRecheck * c.cfg.SocketPoll
}

// verified clears a refusal once the Pod's own launcher answered.
func (c *Controller) verified(st *launcherState, vmi *v1.VirtualMachineInstance, client *launcherclient.Client) {
	if st.clearRefusal() {
		c.cfg.Recorder.Eventf(vmi, corev1.EventTypeNormal, EventLauncherVerified,
			"The launcher of Pod %s (pid %d) answers for VMI uid %s", client.Target().PodUID, client.PeerPID(), vmi.UID)
	}
}

// launcherCondition sets the LauncherUnverified condition while the
// launcher is refused (True, the launcherclient reason and message) and
// Ready False (reason LauncherUnverified) on a Running VMI: the node agent
// cannot know the VM's state. Once verified the condition goes, and so
// does a Ready it set (the domain sets Ready again).
func launcherCondition(vmi *v1.VirtualMachineInstance, refusal *launcherclient.UnverifiedError, now metav1.Time) {
	if refusal == nil {
		removeCondition(vmi, v1.VirtualMachineInstanceLauncherUnverified)
		for _, c := range vmi.Status.Conditions {
			if c.Type == v1.VirtualMachineInstanceReady && c.Reason == ReasonLauncherUnverified {
				removeCondition(vmi, v1.VirtualMachineInstanceReady)
				break
			}
		}
		return
	}
	setCondition(vmi, v1.VirtualMachineInstanceCondition{Type: v1.VirtualMachineInstanceLauncherUnverified,
		Status: corev1.ConditionTrue, Reason: refusal.Reason, Message: refusal.Message}, now)
	if vmi.Status.Phase == v1.Running {
		setCondition(vmi, v1.VirtualMachineInstanceCondition{Type: v1.VirtualMachineInstanceReady,
			Status: corev1.ConditionFalse, Reason: ReasonLauncherUnverified,
			Message: "the node agent does not talk to an unverified launcher: the VM's state is unknown"}, now)
	}
}
