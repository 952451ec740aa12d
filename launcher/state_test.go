package launcher

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestPauseReason(t *testing.T) {
	for _, tt := range []struct {
		status    string
		requested bool
		want      Reason
	}{
		{"paused", true, ReasonUser},
		{"paused", false, ReasonUnknownPause},
		{"io-error", true, ReasonIOError},
		{"postmigrate", false, ReasonMigration},
		{"finish-migrate", false, ReasonMigration},
		{"inmigrate", false, ReasonMigration},
		{"prelaunch", false, ReasonStartPaused},
		{"guest-panicked", false, ReasonGuestPanicked},
	} {
		if got := pauseReason(tt.status, tt.requested); got != tt.want {
			t.Errorf("pauseReason(%q, %v) = %s, want %s", tt.status, tt.requested, got, tt.want)
		}
	}
}

func TestExitReason(t *testing.T) {
	for _, tt := range []struct {
		guest, host bool
		code        int
		want        Reason
	}{
		{true, false, 0, ReasonGuestShutdown},
		{true, true, 0, ReasonGuestShutdown}, // asked, and the guest did power off
		{false, true, 0, ReasonHostRequest},
		{false, true, -1, ReasonHostRequest},
		{false, false, 1, ReasonCrashed},
		{false, false, -1, ReasonCrashed},
		{true, false, 1, ReasonCrashed},
	} {
		if got := exitReason(tt.guest, tt.host, tt.code); got != tt.want {
			t.Errorf("exitReason(%v, %v, %d) = %s, want %s", tt.guest, tt.host, tt.code, got, tt.want)
		}
	}
}

func TestWatchersSeeEveryChange(t *testing.T) {
	s := newDomainState("tcg")
	early := &Watcher{s: s}
	s.handle(event{kind: evBooted})
	s.handle(event{kind: evBooted}) // no change: not recorded
	s.handle(event{kind: evPauseAsked, on: true})
	s.handle(event{kind: evStatus, status: "paused"})
	late := &Watcher{s: s, next: s.get().Seq + 1}
	s.handle(event{kind: evExited, code: 0})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var got []State
	for i := 0; i < 4; i++ {
		d, err := early.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, d.State)
	}
	want := []State{StateStarting, StateRunning, StatePaused, StateShutoff}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("early watcher saw %v, want %v", got, want)
		}
	}
	if d, err := late.Next(ctx); err != nil || d.State != StateShutoff {
		t.Fatalf("late watcher: %v %v", d, err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	if _, err := late.Next(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("no more changes: %v", err)
	}
	go s.handle(event{kind: evAgent, on: true})
	if d, err := late.WaitFor(ctx, func(d Domain) bool { return d.AgentConnected }); err != nil || !d.AgentConnected {
		t.Fatalf("WaitFor: %v %v", d, err)
	}
}

func TestHistoryIsBounded(t *testing.T) {
	s := newDomainState("tcg")
	w := &Watcher{s: s}
	for i := 0; i < maxHistory+10; i++ {
		s.handle(event{kind: evPanicked, message: time.Duration(i).String()})
	}
	d, err := w.Next(context.Background())
	if err != nil || d.Seq != s.first {
		t.Fatalf("a watcher that fell behind resumes at the oldest kept: seq %d, first %d, %v", d.Seq, s.first, err)
	}
	if len(s.history) != maxHistory {
		t.Fatalf("history %d", len(s.history))
	}
}

// The state machine, transition by transition: each case starts from a
// domain and memory, feeds events, and wants the resulting State, Reason,
// Message and what it remembered.
func TestTransitions(t *testing.T) {
	starting := Domain{State: StateStarting, Accel: "tcg"}
	running := Domain{State: StateRunning, Reason: ReasonBooted, PID: 42, AgentConnected: true}
	paused := Domain{State: StatePaused, Reason: ReasonUser}
	migrating := Domain{State: StateMigrating, Message: "m"}
	shuttingDown := Domain{State: StateShuttingDown, Reason: ReasonACPI}
	for _, tt := range []struct {
		name    string
		from    Domain
		mem     memory
		events  []event
		state   State
		reason  Reason
		message string
		wantMem memory
	}{
		{"normal start resumes", starting, memory{}, []event{{kind: evBooted}}, StateRunning, ReasonBooted, "", memory{}},
		{"startStrategy Paused", starting, memory{}, []event{{kind: evStartPaused}}, StatePaused, ReasonStartPaused, "", memory{}},
		{"incoming start waits paused", starting, memory{}, []event{{kind: evIncoming}}, StatePaused, ReasonMigration,
			"waiting for an incoming migration", memory{}},
		{"incoming, then QEMU says inmigrate", starting, memory{}, []event{{kind: evIncoming}, {kind: evStatus, status: "inmigrate"}},
			StatePaused, ReasonMigration, "", memory{}},
		{"a start step failed", starting, memory{}, []event{{kind: evStartFailed, message: "boom"}}, StateShutoff, ReasonFailedToStart, "boom", memory{}},
		{"RESUME while starting", starting, memory{}, []event{{kind: evResume}}, StateRunning, ReasonBooted, "", memory{}},
		{"RESUME after a pause", paused, memory{}, []event{{kind: evResume}}, StateRunning, ReasonUnpaused, "", memory{}},
		{"RESUME after a migration", migrating, memory{}, []event{{kind: evResume}}, StateRunning, ReasonUnpaused, "", memory{}},
		{"RESUME while running changes nothing", running, memory{}, []event{{kind: evResume}}, StateRunning, ReasonBooted, "", memory{}},
		{"asked pause", running, memory{}, []event{{kind: evPauseAsked, on: true}, {kind: evStatus, status: "paused"}},
			StatePaused, ReasonUser, "", memory{pauseAsked: true}},
		{"unasked pause", running, memory{}, []event{{kind: evStatus, status: "paused"}}, StatePaused, ReasonUnknownPause, "", memory{}},
		{"I/O error pause", running, memory{}, []event{{kind: evStatus, status: "io-error"}}, StatePaused, ReasonIOError, "", memory{}},
		{"unpause asked, QEMU runs", paused, memory{pauseAsked: true}, []event{{kind: evPauseAsked}, {kind: evStatus, running: true, status: "running"}},
			StateRunning, ReasonUnpaused, "", memory{}},
		{"QEMU status shutdown", running, memory{}, []event{{kind: evStatus, status: "shutdown"}}, StateShuttingDown, ReasonBooted, "", memory{}},
		{"status ignored while shutting down", shuttingDown, memory{}, []event{{kind: evStatus, status: "paused"}},
			StateShuttingDown, ReasonACPI, "", memory{}},
		{"power button", running, memory{}, []event{{kind: evPowerdown}}, StateShuttingDown, ReasonACPI, "", memory{}},
		{"guest powers off", running, memory{}, []event{{kind: evShutdown, guest: true, message: "guest-shutdown"}},
			StateShuttingDown, ReasonGuestShutdown, "guest-shutdown", memory{guestShutdown: true}},
		{"host quit", running, memory{}, []event{{kind: evShutdown, message: "host-qmp-quit"}},
			StateShuttingDown, ReasonHostRequest, "host-qmp-quit", memory{}},
		{"panic", running, memory{}, []event{{kind: evPanicked, message: "pause"}}, StateRunning, ReasonGuestPanicked, "pause", memory{}},
		{"watchdog resets the guest", running, memory{}, []event{{kind: evWatchdog, message: "reset"}},
			StateRunning, ReasonBooted, "watchdog fired: reset", memory{watchdog: "reset"}},
		{"watchdog powers off (QEMU 7.2 exits 0)", running, memory{}, []event{{kind: evWatchdog, message: "poweroff"},
			{kind: evExited, code: 0, message: "QEMU exited with status 0"}},
			StateShutoff, ReasonCrashed, "watchdog fired: poweroff (QEMU exited with status 0)", memory{watchdog: "poweroff"}},
		{"watchdog powers off (SHUTDOWN first)", running, memory{}, []event{{kind: evWatchdog, message: "poweroff"}, {kind: evShutdown, guest: true, message: "guest-panic"},
			{kind: evExited, code: 0, message: "QEMU exited with status 0"}},
			StateShutoff, ReasonCrashed, "watchdog fired: poweroff (QEMU exited with status 0)", memory{guestShutdown: true, watchdog: "poweroff"}},
		{"watchdog shutdown: the guest powers off", running, memory{}, []event{{kind: evWatchdog, message: "shutdown"}, {kind: evPowerdown},
			{kind: evShutdown, guest: true, message: "guest-shutdown"}, {kind: evExited, code: 0, message: "QEMU exited with status 0"}},
			StateShutoff, ReasonGuestShutdown, "watchdog fired: shutdown", memory{guestShutdown: true, watchdog: "shutdown"}},
		{"guest power-off, exit 0", running, memory{}, []event{{kind: evShutdown, guest: true}, {kind: evExited, code: 0, message: "QEMU exited with status 0", detail: "tail"}},
			StateShutoff, ReasonGuestShutdown, "QEMU exited with status 0", memory{guestShutdown: true}},
		{"killed by the host", running, memory{}, []event{{kind: evHostRequested}, {kind: evExited, code: -1, message: "QEMU ended: signal: killed", detail: "tail"}},
			StateShutoff, ReasonHostRequest, "QEMU ended: signal: killed", memory{hostRequested: true}},
		{"crash carries QEMU's last output", running, memory{}, []event{{kind: evExited, code: 1, message: "QEMU exited with status 1", detail: "qemu: oops"}},
			StateShutoff, ReasonCrashed, "QEMU exited with status 1: qemu: oops", memory{}},
		{"agent lost", running, memory{}, []event{{kind: evAgent}}, StateRunning, ReasonBooted, "", memory{}},
		{"target resumed after its incoming migration", starting, memory{}, []event{{kind: evIncoming}, {kind: evResume}},
			StateRunning, ReasonMigrated, "", memory{}},
		{"target QEMU exits while waiting", starting, memory{}, []event{{kind: evIncoming}, {kind: evExited, code: 1, message: "QEMU exited with status 1"}},
			StateShutoff, ReasonMigrationFailed, "QEMU exited with status 1", memory{}},
		{"target failed, then killed", starting, memory{}, []event{{kind: evIncoming}, {kind: evIncomingFailed, message: "x"}, {kind: evHostRequested}, {kind: evExited, code: -1, message: "killed"}},
			StateShutoff, ReasonMigrationFailed, "killed", memory{inFailed: true, hostRequested: true}},
		{"source migrating ignores STOP and RESUME", running, memory{}, []event{{kind: evMigrationStarted}, {kind: evStatus, status: "finish-migrate"}, {kind: evResume}},
			StateMigrating, ReasonMigration, "", memory{migrating: true}},
		{"source canceled runs on", running, memory{}, []event{{kind: evMigrationStarted}, {kind: evMigrationAborted, running: true, reason: ReasonMigrationCanceled, message: "canceled"}},
			StateRunning, ReasonMigrationCanceled, "canceled", memory{}},
		{"source completed waits", running, memory{}, []event{{kind: evMigrationStarted}, {kind: evMigrationCompleted}},
			StateMigrating, ReasonMigration, "migrated: waiting for the target to run", memory{migrating: true}},
		{"source finalized", running, memory{}, []event{{kind: evMigrationStarted}, {kind: evMigrationFinal}, {kind: evHostRequested}, {kind: evExited, message: "QEMU exited with status 0"}},
			StateShutoff, ReasonMigrated, "QEMU exited with status 0", memory{migrating: true, migrated: true, hostRequested: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d, m := tt.from, tt.mem
			for _, ev := range tt.events {
				d, m = transition(d, m, ev)
			}
			if d.State != tt.state || d.Reason != tt.reason || d.Message != tt.message || m != tt.wantMem {
				t.Errorf("got %s (%s) %q %+v, want %s (%s) %q %+v", d.State, d.Reason, d.Message, m, tt.state, tt.reason, tt.message, tt.wantMem)
			}
		})
	}
}

// Lifecycle facts, and what QEMU's exit clears.
func TestTransitionFacts(t *testing.T) {
	d, m := transition(Domain{State: StateStarting}, memory{}, event{kind: evAccel, accel: "kvm"})
	d, m = transition(d, m, event{kind: evNetwork, interfaces: []Interface{{Name: "default", Queues: 2}}})
	d, m = transition(d, m, event{kind: evExec, pid: 7, deviceCgroup: "/sys/fs/cgroup/x", selinuxContext: "s0:c1,c2"})
	d, m = transition(d, m, event{kind: evAgent, on: true})
	if d.Accel != "kvm" || len(d.Interfaces) != 1 || d.PID != 7 || d.DeviceCgroup != "/sys/fs/cgroup/x" ||
		d.SELinuxContext != "s0:c1,c2" || !d.AgentConnected || d.State != StateStarting {
		t.Fatalf("facts: %+v", d)
	}
	d, _ = transition(d, m, event{kind: evExited, code: 0})
	if d.PID != 0 || d.AgentConnected || d.ExitCode == nil || *d.ExitCode != 0 || d.DeviceCgroup == "" || d.Accel != "kvm" {
		t.Fatalf("after exit: %+v", d)
	}
}

// Only events change the domain: an event that changes nothing records
// nothing.
func TestHandleRecordsOnlyChanges(t *testing.T) {
	s := newDomainState("tcg")
	first := s.get().Seq
	if d := s.handle(event{kind: evPauseAsked, on: true}); d.Seq != first {
		t.Fatalf("a memory-only event recorded a change: %+v", d)
	}
	if d := s.handle(event{kind: evBooted}); d.Seq != first+1 || d.State != StateRunning {
		t.Fatalf("boot: %+v", d)
	}
	if d := s.handle(event{kind: evStatus, status: "paused"}); d.Reason != ReasonUser {
		t.Fatalf("the machine forgot the pause it was asked for: %+v", d)
	}
}

// StopSignal: the first stop signal while the VM runs stays on the domain
// through the shutdown and QEMU's exit, whatever ends it; none comes after
// the end.
func TestStopSignal(t *testing.T) {
	running := Domain{State: StateRunning, Reason: ReasonBooted}
	sig := func(name string) event { return event{kind: evStopSignal, message: name} }
	for _, tt := range []struct {
		name   string
		from   Domain
		events []event
		want   string
		reason Reason
	}{
		{"none", running, []event{{kind: evShutdown, guest: true}, {kind: evExited, code: 0}}, "", ReasonGuestShutdown},
		{"SIGTERM, the guest powers off", running, []event{sig("terminated"), {kind: evPowerdown}, {kind: evShutdown, guest: true},
			{kind: evExited, code: 0}}, "terminated", ReasonGuestShutdown},
		{"SIGTERM, grace over, quit", running, []event{sig("terminated"), {kind: evPowerdown}, {kind: evHostRequested},
			{kind: evExited, code: 0}}, "terminated", ReasonHostRequest},
		{"the first signal is kept", running, []event{sig("terminated"), sig("interrupt")}, "terminated", ReasonBooted},
		{"after the end: ignored", running, []event{{kind: evShutdown, guest: true}, {kind: evExited, code: 0}, sig("terminated")},
			"", ReasonGuestShutdown},
		{"while paused", Domain{State: StatePaused, Reason: ReasonUser}, []event{sig("terminated")}, "terminated", ReasonUser},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d, m := tt.from, memory{}
			for _, ev := range tt.events {
				d, m = transition(d, m, ev)
			}
			if d.StopSignal != tt.want || d.Reason != tt.reason {
				t.Errorf("got StopSignal %q reason %s, want %q %s", d.StopSignal, d.Reason, tt.want, tt.reason)
			}
		})
	}
	s := newDomainState("tcg")
	s.handle(event{kind: evBooted})
	before := s.get().Seq
	if d := s.handle(sig("terminated")); d.Seq != before+1 {
		t.Fatalf("the signal was not recorded as a change watchers see: %+v", d)
	}
}
