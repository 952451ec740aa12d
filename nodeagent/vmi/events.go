package vmi

import (
	"fmt"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/kube/vmistatus"
)

// Reasons of the events the node agent records on a VMI for the domain's
// transitions (transitionEvents) and the requests it carries out. The
// refusals and migration failures have theirs beside their code
// (EventLauncherUnverified, EventHostDiskRefused, EventMigrationFailed).
const (
	EventStarted           = "Started"           // Normal: the guest runs (phase Running)
	EventPaused            = "Paused"            // Normal (Warning for an I/O error): the guest is paused
	EventUnpaused          = "Unpaused"          // Normal: a paused guest runs again
	EventShuttingDown      = "ShuttingDown"      // Normal: the guest is shutting down
	EventShutdown          = "Shutdown"          // Normal: the guest powered off (Succeeded)
	EventCrashed           = "Crashed"           // Warning: QEMU ended on its own or the guest panicked (Failed), with the reason
	EventStopped           = "Stopped"           // Warning: the VM ended otherwise (Failed: killed, failed to start, launcher gone), with the reason
	EventAgentConnected    = "AgentConnected"    // Normal: the guest agent answers
	EventAgentDisconnected = "AgentDisconnected" // Normal: the guest agent stopped answering while the guest runs
	EventSoftRebooted      = "SoftRebooted"      // Normal: a soft reboot was sent to the guest
	EventMigrating         = "Migrating"         // Normal: the source started migrating the guest
	EventPreparingTarget   = "PreparingTarget"   // Normal: the target's QEMU waits for the migration stream
	EventMigrated          = "Migrated"          // Normal: the guest runs on the migration's target
)

// maxEventMessage bounds an event's message: it quotes what the launcher
// reports (QEMU's and the guest's words).
const maxEventMessage = 1024

// vmiEvent is one event due on a VMI.
type vmiEvent struct {
	typ, reason, msg string
}

// transitionEvents are the events due for a status write of the node
// agent that replaced before with after: each a change of the VMI's
// status that a domain transition made, so each transition gives one event
// whatever the number of syncs, and a restarted node agent (which finds the
// status already written) gives none again. A transition undone before the
// status was written (paused and unpaused between two writes) gives none.
// The migration's own pause (PausedMigration) is no Paused: its steps have
// their events.
func transitionEvents(before, after *v1.VirtualMachineInstance) []vmiEvent {
	var out []vmiEvent
	add := func(typ, reason, format string, args ...any) {
		out = append(out, vmiEvent{typ: typ, reason: reason, msg: truncateMessage(fmt.Sprintf(format, args...))})
	}
	was, is := before.Status.Phase, after.Status.Phase
	if is.IsFinal() {
		if was.IsFinal() {
			return nil
		}
		ready, _ := vmistatus.Condition(after, v1.VirtualMachineInstanceReady)
		switch reason := after.Status.Reason; {
		case is == v1.Succeeded:
			add(corev1.EventTypeNormal, EventShutdown, "The guest powered off: %s", ready.Message)
		case reason == ReasonCrashed || reason == ReasonGuestPanicked:
			add(corev1.EventTypeWarning, EventCrashed, "%s: %s", reason, ready.Message)
		default:
			add(corev1.EventTypeWarning, EventStopped, "%s: %s", reason, ready.Message)
		}
		return out
	}
	if was != v1.Running && is == v1.Running {
		add(corev1.EventTypeNormal, EventStarted, "The guest runs on node %s", after.Status.NodeName)
	}
	if shuttingDown(after) && !shuttingDown(before) {
		add(corev1.EventTypeNormal, EventShuttingDown, "The guest is shutting down")
	}
	oldPause, wasPaused := userPause(before)
	newPause, isPaused := userPause(after)
	switch {
	case isPaused && (!wasPaused || oldPause.Reason != newPause.Reason):
		typ := corev1.EventTypeNormal
		if newPause.Reason == ReasonPausedIOError {
			typ = corev1.EventTypeWarning
		}
		msg := "The guest is paused (" + newPause.Reason + ")"
		if newPause.Message != "" {
			msg += ": " + newPause.Message
		}
		add(typ, EventPaused, "%s", msg)
	case wasPaused && !isPaused && is == v1.Running:
		add(corev1.EventTypeNormal, EventUnpaused, "The guest runs again (was %s)", oldPause.Reason)
	}
	_, hadAgent := vmistatus.Condition(before, v1.VirtualMachineInstanceAgentConnected)
	_, hasAgent := vmistatus.Condition(after, v1.VirtualMachineInstanceAgentConnected)
	switch {
	case hasAgent && !hadAgent:
		add(corev1.EventTypeNormal, EventAgentConnected, "The guest agent answers")
	case hadAgent && !hasAgent:
		add(corev1.EventTypeNormal, EventAgentDisconnected, "The guest agent no longer answers")
	}
	return append(out, migrationEvents(before.Status.MigrationState, after.Status.MigrationState)...)
}

// migrationEvents: the steps of one migration (the same migrationUid)
// the write recorded.
func migrationEvents(before, after *v1.VirtualMachineInstanceMigrationState) []vmiEvent {
	if after == nil {
		return nil
	}
	if before == nil || before.MigrationUID != after.MigrationUID {
		before = &v1.VirtualMachineInstanceMigrationState{}
	}
	var out []vmiEvent
	if before.StartTimestamp == nil && after.StartTimestamp != nil {
		out = append(out, vmiEvent{corev1.EventTypeNormal, EventMigrating,
			fmt.Sprintf("Migration %s: migrating the guest from node %s to node %s", after.MigrationUID, after.SourceNode, after.TargetNode)})
	}
	if !before.TargetNodeDomainDetected && after.TargetNodeDomainDetected {
		out = append(out, vmiEvent{corev1.EventTypeNormal, EventPreparingTarget,
			fmt.Sprintf("Migration %s: the target on node %s waits for the guest", after.MigrationUID, after.TargetNode)})
	}
	if before.TargetNodeDomainReadyTimestamp == nil && after.TargetNodeDomainReadyTimestamp != nil {
		out = append(out, vmiEvent{corev1.EventTypeNormal, EventMigrated,
			fmt.Sprintf("Migration %s: the guest runs on node %s", after.MigrationUID, after.TargetNode)})
	}
	return out
}

// shuttingDown: Ready False because the guest is shutting down.
func shuttingDown(vmi *v1.VirtualMachineInstance) bool {
	return vmistatus.HasCondition(vmi, v1.VirtualMachineInstanceReady, corev1.ConditionFalse, ReasonNotRunning)
}

// userPause is the Paused condition unless the migration set it.
func userPause(vmi *v1.VirtualMachineInstance) (v1.VirtualMachineInstanceCondition, bool) {
	c, ok := vmistatus.Condition(vmi, v1.VirtualMachineInstancePaused)
	if !ok || c.Status != corev1.ConditionTrue || c.Reason == ReasonPausedMigration {
		return v1.VirtualMachineInstanceCondition{}, false
	}
	return c, true
}

// truncateMessage applies maxEventMessage on a UTF-8 boundary.
func truncateMessage(s string) string {
	if len(s) <= maxEventMessage {
		return s
	}
	const mark = "…"
	i := maxEventMessage - len(mark)
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + mark
}
