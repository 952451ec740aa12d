package migration

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// step is what the controller does next for a migration past Pending.
type step struct {
	// phase is the migration's next phase; "" keeps it.
	phase v1.VirtualMachineInstanceMigrationPhase
	// reason and msg explain it (Failed: the condition's reason).
	reason, msg string
	// writeState: at Scheduled, the VMI's migrationState gets the
	// migration's identity and configuration.
	writeState bool
	// failState: the controller ended the migration itself (a timeout, the
	// target Pod failed or vanished, canceled before TargetReady): the
	// VMI's migrationState (if this migration's) gets failed,
	// failureReason and endTimestamp.
	failState bool
	// abort: the migration was deleted after TargetReady: the VMI's
	// migrationState gets abortRequested and abortStatus Aborting.
	abort bool
	// handoff: the VMI moves to the target (nodeName, launcherPod,
	// activePods, migrationState.endTimestamp).
	handoff bool
	// deleteTarget: the target Pod is deleted.
	deleteTarget bool
	// after: check again then (a timeout may expire); 0: events suffice.
	after time.Duration
}

// stateOf is the VMI's migrationState when it is m's, else nil: a
// migrationState of another migration says nothing about m.
func stateOf(m *v1.VirtualMachineInstanceMigration, vmi *v1.VirtualMachineInstance) *v1.VirtualMachineInstanceMigrationState {
	if vmi == nil || vmi.Status.MigrationState == nil || vmi.Status.MigrationState.MigrationUID != m.UID {
		return nil
	}
	return vmi.Status.MigrationState
}

// progress is the phase function of a migration past Pending (Scheduling
// to Running), from the migration, its VMI (nil: gone), its target Pod
// (nil: gone) and the time: the table of docs/migration.md, "The handoff
// through the API".
func progress(m *v1.VirtualMachineInstanceMigration, vmi *v1.VirtualMachineInstance, target *corev1.Pod, now time.Time, t Timeouts) step {
	phase := m.Status.Phase
	deleting := m.DeletionTimestamp != nil
	if vmi == nil || vmi.DeletionTimestamp != nil || vmi.Status.Phase.IsFinal() {
		reason, msg := ReasonVMINotFound, fmt.Sprintf("VMI %q is gone", m.Spec.VMIName)
		if vmi != nil {
			reason, msg = ReasonVMIFinal, fmt.Sprintf("VMI %q is %s", vmi.Name, finalWord(vmi))
		}
		return step{phase: v1.MigrationFailed, reason: reason, msg: msg, deleteTarget: true}
	}
	ms := stateOf(m, vmi)
	if ms != nil && ms.Completed && !ms.Failed && ms.TargetNodeDomainReadyTimestamp != nil {
		return step{phase: v1.MigrationSucceeded, reason: ReasonMigrationSucceeded, handoff: true,
			msg: fmt.Sprintf("VMI %q runs on node %s in Pod %s", vmi.Name, ms.TargetNode, ms.TargetPod)}
	}
	if ms != nil && (ms.Failed || ms.AbortStatus == v1.MigrationAbortSucceeded) {
		if ms.AbortRequested || deleting {
			return step{phase: v1.MigrationFailed, reason: ReasonAborted, msg: "canceled: " + failureWord(ms), deleteTarget: true}
		}
		return step{phase: v1.MigrationFailed, reason: ReasonMigrationFailed, msg: failureWord(ms), deleteTarget: true}
	}
	beforeReady := phase == v1.MigrationScheduling || phase == v1.MigrationScheduled || phase == v1.MigrationPreparingTarget
	if deleting && beforeReady {
		return step{phase: v1.MigrationFailed, reason: ReasonAborted, msg: "canceled before the target was ready",
			failState: true, deleteTarget: true}
	}
	if ms == nil && !beforeReady {
		// TargetReady and Running were reached on this migration's
		// migrationState; without it no node agent acts for it any more.
		return step{phase: v1.MigrationFailed, reason: ReasonMigrationFailed, deleteTarget: true,
			msg: fmt.Sprintf("VMI %q no longer holds this migration's migrationState", vmi.Name)}
	}
	if s, bad := targetTrouble(target); bad {
		return s
	}
	if deleting && (ms == nil || !ms.AbortRequested) {
		return step{abort: true, reason: ReasonAbortRequested, msg: "canceled: the source is asked to abort"}
	}
	switch phase {
	case v1.MigrationScheduling:
		if target.Spec.NodeName != "" {
			return step{phase: v1.MigrationScheduled, writeState: true,
				msg: fmt.Sprintf("target Pod %s bound to node %s", target.Name, target.Spec.NodeName)}
		}
		return pendingTimeouts(target, now, t, true)
	case v1.MigrationScheduled:
		if target.Status.Phase == corev1.PodRunning {
			return step{phase: v1.MigrationPreparingTarget, msg: fmt.Sprintf("target Pod %s runs", target.Name)}
		}
		return pendingTimeouts(target, now, t, false)
	case v1.MigrationPreparingTarget:
		if ms != nil && ms.TargetNodeAddress != "" && ms.TargetMigrationPort != 0 {
			return step{phase: v1.MigrationTargetReady,
				msg: fmt.Sprintf("the target listens at %s port %d", ms.TargetNodeAddress, ms.TargetMigrationPort)}
		}
	case v1.MigrationTargetReady:
		if ms != nil && ms.StartTimestamp != nil {
			return step{phase: v1.MigrationRunning, msg: "the source started sending"}
		}
	}
	return step{}
}

func failureWord(ms *v1.VirtualMachineInstanceMigrationState) string {
	if ms.FailureReason != "" {
		return ms.FailureReason
	}
	if ms.AbortStatus == v1.MigrationAbortSucceeded {
		return "aborted"
	}
	return "the migration failed"
}

// targetTrouble: a target Pod that is gone, being deleted, or ended before
// the handoff fails the migration.
func targetTrouble(target *corev1.Pod) (step, bool) {
	switch {
	case target == nil:
		return step{phase: v1.MigrationFailed, reason: ReasonTargetPodVanished, msg: "the target Pod is gone", failState: true}, true
	case target.DeletionTimestamp != nil:
		return step{phase: v1.MigrationFailed, reason: ReasonTargetPodVanished,
			msg: fmt.Sprintf("target Pod %s is being deleted", target.Name), failState: true}, true
	case target.Status.Phase == corev1.PodFailed || target.Status.Phase == corev1.PodSucceeded:
		msg := fmt.Sprintf("target Pod %s ended (%s)", target.Name, target.Status.Phase)
		if target.Status.Reason != "" {
			msg += ": " + target.Status.Reason
		}
		return step{phase: v1.MigrationFailed, reason: ReasonTargetPodFailed, msg: msg, failState: true}, true
	}
	return step{}, false
}

// pendingTimeouts fails a target Pod left unschedulable (scheduling only)
// or Pending too long, else asks to be checked again when the first
// timeout expires.
func pendingTimeouts(target *corev1.Pod, now time.Time, t Timeouts, scheduling bool) step {
	next := target.CreationTimestamp.Add(t.Pending).Sub(now)
	if next <= 0 {
		return step{phase: v1.MigrationFailed, reason: ReasonPendingTimeout, failState: true, deleteTarget: true,
			msg: fmt.Sprintf("target Pod %s Pending for more than %s", target.Name, t.Pending)}
	}
	if scheduling {
		for _, c := range target.Status.Conditions {
			if c.Type != corev1.PodScheduled || c.Status != corev1.ConditionFalse || c.Reason != corev1.PodReasonUnschedulable {
				continue
			}
			left := c.LastTransitionTime.Add(t.Unschedulable).Sub(now)
			if left <= 0 {
				return step{phase: v1.MigrationFailed, reason: ReasonUnschedulable, failState: true, deleteTarget: true,
					msg: fmt.Sprintf("target Pod %s unschedulable for more than %s: %s", target.Name, t.Unschedulable, c.Message)}
			}
			next = min(next, left)
		}
	}
	return step{after: next}
}
