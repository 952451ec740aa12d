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
	s.set(func(d *Domain) { d.State = StateRunning })
	s.set(func(d *Domain) { d.State = StateRunning }) // no change: not recorded
	s.set(func(d *Domain) { d.State, d.Reason = StatePaused, ReasonUser })
	late := &Watcher{s: s, next: s.get().Seq + 1}
	s.set(func(d *Domain) { d.State = StateShutoff })

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
	go s.set(func(d *Domain) { d.AgentConnected = true })
	if d, err := late.WaitFor(ctx, func(d Domain) bool { return d.AgentConnected }); err != nil || !d.AgentConnected {
		t.Fatalf("WaitFor: %v %v", d, err)
	}
}

func TestHistoryIsBounded(t *testing.T) {
	s := newDomainState("tcg")
	w := &Watcher{s: s}
	for i := 0; i < maxHistory+10; i++ {
		s.set(func(d *Domain) { d.Message = time.Duration(i).String() })
	}
	d, err := w.Next(context.Background())
	if err != nil || d.Seq != s.first {
		t.Fatalf("a watcher that fell behind resumes at the oldest kept: seq %d, first %d, %v", d.Seq, s.first, err)
	}
	if len(s.history) != maxHistory {
		t.Fatalf("history %d", len(s.history))
	}
}
