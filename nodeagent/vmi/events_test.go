package vmi

import (
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/launcher/rpc"
)

// applied is the VMI status the node agent writes for domain d over prev
// (ApplyStatus, as updateStatus does): the events then come from the same
// mapping the status does.
func applied(prev *v1.VirtualMachineInstance, d *rpc.Domain, agentUp bool) *v1.VirtualMachineInstance {
	vmi := prev.DeepCopy()
	o := Observation{Domain: d, Now: metav1.Now()}
	if agentUp {
		o.Guest = &rpc.GuestInfoResponse{OsId: "testguest"}
	}
	ApplyStatus(vmi, o)
	return vmi
}

func TestTransitionEvents(t *testing.T) {
	scheduled := &v1.VirtualMachineInstance{Status: v1.VirtualMachineInstanceStatus{Phase: v1.Scheduled, NodeName: "node-1"}}
	dom := func(state rpc.DomainState, reason rpc.DomainReason, msg string, agent bool) *rpc.Domain {
		return &rpc.Domain{State: state, Reason: reason, Message: msg, AgentConnected: agent, Accelerator: "tcg"}
	}
	running := applied(scheduled, dom(stateRunning, 0, "", false), false)
	withAgent := applied(running, dom(stateRunning, 0, "", true), true)
	paused := applied(withAgent, dom(statePaused, domainReasonUser, "paused by the user", true), true)
	pausedIO := applied(withAgent, dom(statePaused, domainReasonIOError, "disk full", true), true)
	pausedMig := applied(withAgent, dom(statePaused, domainReasonMigration, "", true), true)
	shuttingDown := applied(withAgent, dom(stateShuttingDown, 0, "", true), true)
	for _, tc := range []struct {
		name          string
		before, after *v1.VirtualMachineInstance
		want          []string // type/reason
		wantInMsg     string
	}{
		{"started", scheduled, running, []string{"Normal/Started"}, "node-1"},
		{"started with the agent at once", scheduled, applied(scheduled, dom(stateRunning, 0, "", true), true),
			[]string{"Normal/Started", "Normal/AgentConnected"}, ""},
		{"started paused (runStrategy Paused)", scheduled, applied(scheduled, dom(statePaused, domainReasonStartPaused, "", false), false),
			[]string{"Normal/Started", "Normal/Paused"}, ReasonPausedStart},
		{"starting: nothing yet", scheduled, applied(scheduled, dom(stateStarting, 0, "", false), false), nil, ""},
		{"a resync: nothing", withAgent, applied(withAgent, dom(stateRunning, 0, "", true), true), nil, ""},
		{"agent connected", running, withAgent, []string{"Normal/AgentConnected"}, ""},
		{"agent disconnected", withAgent, applied(withAgent, dom(stateRunning, 0, "", false), false), []string{"Normal/AgentDisconnected"}, ""},
		{"paused by the user", withAgent, paused, []string{"Normal/Paused"}, "paused by the user"},
		{"paused again: nothing", paused, applied(paused, dom(statePaused, domainReasonUser, "paused by the user", true), true), nil, ""},
		{"paused on an I/O error: Warning", withAgent, pausedIO, []string{"Warning/Paused"}, "disk full"},
		{"unpaused", paused, applied(paused, dom(stateRunning, 0, "", true), true), []string{"Normal/Unpaused"}, ReasonPausedByUser},
		{"the migration's pause: no Paused", withAgent, pausedMig, nil, ""},
		{"the migration's pause ends: no Unpaused", pausedMig, applied(pausedMig, dom(stateRunning, 0, "", true), true), nil, ""},
		{"shutting down", withAgent, shuttingDown, []string{"Normal/ShuttingDown"}, ""},
		{"shut down", shuttingDown, applied(shuttingDown, dom(stateShutoff, domainReasonGuestShutdown, "the guest powered off", false), false),
			[]string{"Normal/Shutdown"}, "powered off"},
		{"crashed with QEMU's reason", withAgent, applied(withAgent, &rpc.Domain{State: stateShutoff, Reason: domainReasonCrashed,
			Message: "QEMU exited: killed by signal 9", Exited: true, ExitCode: 137}, false),
			[]string{"Warning/Crashed"}, "Crashed: QEMU exited: killed by signal 9"},
		{"guest panicked", withAgent, applied(withAgent, dom(stateShutoff, domainReasonGuestPanicked, "guest-panicked", false), false),
			[]string{"Warning/Crashed"}, ReasonGuestPanicked},
		{"failed to start", scheduled, applied(scheduled, dom(stateShutoff, domainReasonFailedToStart, "no such file", false), false),
			[]string{"Warning/Stopped"}, "FailedToStart: no such file"},
		{"killed by the host", withAgent, applied(withAgent, dom(stateShutoff, domainReasonHostRequest, "quit", false), false),
			[]string{"Warning/Stopped"}, ReasonKilled},
		{"already final: nothing", applied(shuttingDown, dom(stateShutoff, domainReasonGuestShutdown, "", false), false),
			applied(shuttingDown, dom(stateShutoff, domainReasonGuestShutdown, "", false), false), nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			var msgs string
			for _, e := range transitionEvents(tc.before, tc.after) {
				got = append(got, e.typ+"/"+e.reason)
				msgs += e.msg + "\n"
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("events %v, want %v (messages %q)", got, tc.want, msgs)
			}
			if !strings.Contains(msgs, tc.wantInMsg) {
				t.Errorf("messages %q lack %q", msgs, tc.wantInMsg)
			}
		})
	}
}

func TestMigrationEvents(t *testing.T) {
	now := metav1.Now()
	ms := func(uid string, mutate func(*v1.VirtualMachineInstanceMigrationState)) *v1.VirtualMachineInstanceMigrationState {
		s := &v1.VirtualMachineInstanceMigrationState{MigrationUID: k8stypes.UID("m" + uid), SourceNode: "node-1", TargetNode: "node-2"}
		if mutate != nil {
			mutate(s)
		}
		return s
	}
	started := func(s *v1.VirtualMachineInstanceMigrationState) { s.StartTimestamp = &now }
	detected := func(s *v1.VirtualMachineInstanceMigrationState) { s.TargetNodeDomainDetected = true }
	ready := func(s *v1.VirtualMachineInstanceMigrationState) {
		s.StartTimestamp, s.TargetNodeDomainDetected, s.Completed, s.TargetNodeDomainReadyTimestamp = &now, true, true, &now
	}
	for _, tc := range []struct {
		name          string
		before, after *v1.VirtualMachineInstanceMigrationState
		want          []string
	}{
		{"no migration", nil, nil, nil},
		{"the controller's new migrationState", nil, ms("1", nil), nil},
		{"target prepared", ms("1", nil), ms("1", detected), []string{EventPreparingTarget}},
		{"started", ms("1", detected), ms("1", func(s *v1.VirtualMachineInstanceMigrationState) { detected(s); started(s) }), []string{EventMigrating}},
		{"the guest runs on the target", ms("1", func(s *v1.VirtualMachineInstanceMigrationState) { detected(s); started(s) }), ms("1", ready),
			[]string{EventMigrated}},
		{"a resync: nothing", ms("1", ready), ms("1", ready), nil},
		{"a new migration starts over", ms("1", ready), ms("2", started), []string{EventMigrating}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, e := range migrationEvents(tc.before, tc.after) {
				got = append(got, e.reason)
				if e.typ != corev1.EventTypeNormal || !strings.Contains(e.msg, "Migration m") {
					t.Errorf("event %+v", e)
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("events %v, want %v", got, tc.want)
			}
		})
	}
}

// What the launcher (QEMU, the guest) says is quoted, bounded.
func TestEventMessageBounded(t *testing.T) {
	running := &v1.VirtualMachineInstance{Status: v1.VirtualMachineInstanceStatus{Phase: v1.Running}}
	after := applied(running, &rpc.Domain{State: stateShutoff, Reason: domainReasonCrashed, Message: strings.Repeat("é", 4000)}, false)
	ev := transitionEvents(running, after)
	if len(ev) != 1 || len(ev[0].msg) > maxEventMessage || !utf8.ValidString(ev[0].msg) {
		t.Errorf("events %d, message of %d bytes", len(ev), len(ev[0].msg))
	}
}
