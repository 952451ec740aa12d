package signals

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kemu-dev/kemu/launcher"
)

// fakeVM records what the loop asks of it; Wait returns once end is called.
type fakeVM struct {
	calls       chan string
	ended       chan struct{}
	final       launcher.Domain
	shutdownErr error
}

func newFakeVM() *fakeVM {
	return &fakeVM{calls: make(chan string, 10), ended: make(chan struct{})}
}

func (f *fakeVM) Shutdown(_ context.Context, grace time.Duration) (launcher.Domain, error) {
	f.calls <- fmt.Sprintf("Shutdown %s", grace)
	return launcher.Domain{}, f.shutdownErr
}

func (f *fakeVM) Stop(context.Context) (launcher.Domain, error) {
	f.calls <- "Stop"
	return launcher.Domain{}, nil
}

func (f *fakeVM) Kill(context.Context) (launcher.Domain, error) {
	f.calls <- "Kill"
	return launcher.Domain{}, nil
}

func (f *fakeVM) Wait(ctx context.Context) (launcher.Domain, error) {
	select {
	case <-f.ended:
		return f.final, nil
	case <-ctx.Done():
		return launcher.Domain{}, ctx.Err()
	}
}

func (f *fakeVM) end(reason launcher.Reason) {
	f.final = launcher.Domain{State: launcher.StateShutoff, Reason: reason}
	close(f.ended)
}

// next waits for the VM's next call.
func (f *fakeVM) next(t *testing.T) string {
	t.Helper()
	select {
	case c := <-f.calls:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no call within 10 s")
		return ""
	}
}

// reports collects the loop's reports.
type reports struct {
	mu    sync.Mutex
	lines []string
	seen  chan struct{}
}

func (r *reports) add(format string, args ...any) {
	r.mu.Lock()
	r.lines = append(r.lines, fmt.Sprintf(format, args...))
	r.mu.Unlock()
	r.seen <- struct{}{}
}

func (r *reports) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lines)
}

func TestRun(t *testing.T) {
	type step struct {
		send string // SIGTERM, SIGINT, shutdown=WHY, stop
		call string // what the VM is asked for ("": nothing)
	}
	for _, tc := range []struct {
		name     string
		killEach bool
		stopHost bool
		steps    []step
		reason   launcher.Reason
		shutErr  error
		want     Result
		reports  []string
		unread   int // signals the loop left unread
	}{
		{name: "guest powers off by itself", reason: launcher.ReasonGuestShutdown,
			want: Result{Exit: ExitPoweredOff}},
		{name: "crash", reason: launcher.ReasonCrashed, stopHost: true, want: Result{Exit: ExitFailed}},
		{name: "host request", reason: launcher.ReasonHostRequest, want: Result{Exit: ExitStopped}},
		{name: "SIGTERM: graceful shutdown", steps: []step{{"SIGTERM", "Shutdown 30s"}},
			reason: launcher.ReasonGuestShutdown, want: Result{Stopped: true, Exit: ExitPoweredOff},
			reports: []string{"shutting down: terminated, why \"\", grace 30s"}},
		{name: "grace over", steps: []step{{"SIGINT", "Shutdown 30s"}},
			reason: launcher.ReasonHostRequest, want: Result{Stopped: true, Exit: ExitStopped},
			reports: []string{"shutting down: interrupt, why \"\", grace 30s"}},
		{name: "second signal kills, a third is not read", steps: []step{{"SIGTERM", "Shutdown 30s"}, {"SIGINT", "Kill"}, {"SIGTERM", ""}},
			reason: launcher.ReasonHostRequest, want: Result{Stopped: true, Exit: ExitStopped}, unread: 1,
			reports: []string{"shutting down: terminated, why \"\", grace 30s", "killing: interrupt"}},
		{name: "every later signal kills", killEach: true, stopHost: true,
			steps:  []step{{"SIGINT", "Shutdown 30s"}, {"SIGINT", "Kill"}, {"SIGINT", "Kill"}},
			reason: launcher.ReasonHostRequest, want: Result{Stopped: true, Exit: ExitStopped},
			reports: []string{"shutting down: interrupt, why \"\", grace 30s", "killing: interrupt", "killing: interrupt"}},
		{name: "crash while shutting down: the reason decides", steps: []step{{"SIGTERM", "Shutdown 30s"}},
			reason: launcher.ReasonCrashed, want: Result{Stopped: true, Exit: ExitFailed},
			reports: []string{"shutting down: terminated, why \"\", grace 30s"}},
		{name: "crash while shutting down: stopped by the host", stopHost: true, steps: []step{{"SIGTERM", "Shutdown 30s"}},
			reason: launcher.ReasonCrashed, want: Result{Stopped: true, Exit: ExitStopped},
			reports: []string{"shutting down: terminated, why \"\", grace 30s"}},
		{name: "shutdown request, then a signal kills", stopHost: true, killEach: true,
			steps:  []step{{"shutdown=--timeout reached", "Shutdown 30s"}, {"SIGINT", "Kill"}},
			reason: launcher.ReasonHostRequest, want: Result{Stopped: true, Exit: ExitStopped},
			reports: []string{"shutting down: <nil>, why \"--timeout reached\", grace 30s", "killing: interrupt"}},
		{name: "stop request, then a signal kills", stopHost: true, killEach: true,
			steps:  []step{{"stop", "Stop"}, {"SIGTERM", "Kill"}},
			reason: launcher.ReasonCrashed, want: Result{Stopped: true, Exit: ExitStopped},
			reports: []string{"stopping: pause: no QMP", "killing: terminated"}},
		{name: "shutdown fails", steps: []step{{"SIGTERM", "Shutdown 30s"}}, shutErr: errors.New("no QMP"),
			reason: launcher.ReasonCrashed, want: Result{Stopped: true, Exit: ExitFailed},
			reports: []string{"shutting down: terminated, why \"\", grace 30s", "shutdown failed: no QMP"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vm := newFakeVM()
			vm.shutdownErr = tc.shutErr
			sigs := make(chan os.Signal, 2)
			shutdowns := make(chan string)
			stops := make(chan error)
			r := &reports{seen: make(chan struct{}, 10)}
			done := make(chan Result, 1)
			go func() {
				done <- Run(context.Background(), vm, Options{
					Signals: sigs, Shutdowns: shutdowns, Stops: stops,
					Grace:          func() time.Duration { return 30 * time.Second },
					KillEachSignal: tc.killEach, StopIsHost: tc.stopHost,
					ShuttingDown: func(sig os.Signal, why string, grace time.Duration) {
						r.add("shutting down: %v, why %q, grace %s", sig, why, grace)
					},
					ShutdownFailed: func(err error) { r.add("shutdown failed: %v", err) },
					Stopping:       func(why error) { r.add("stopping: %v", why) },
					Killing:        func(sig os.Signal) { r.add("killing: %v", sig) },
				})
			}()
			for _, s := range tc.steps {
				switch {
				case s.send == "SIGTERM":
					sigs <- syscall.SIGTERM
				case s.send == "SIGINT":
					sigs <- syscall.SIGINT
				case s.send == "stop":
					stops <- errors.New("pause: no QMP")
				default:
					shutdowns <- s.send[len("shutdown="):]
				}
				if s.call != "" {
					if got := vm.next(t); got != s.call {
						t.Fatalf("after %s: %s, want %s", s.send, got, s.call)
					}
				}
			}
			for range tc.reports {
				select {
				case <-r.seen:
				case <-time.After(10 * time.Second):
					t.Fatalf("reports %q, want %q", r.all(), tc.reports)
				}
			}
			vm.end(tc.reason)
			var got Result
			select {
			case got = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return within 10 s of the VM's end")
			}
			tc.want.Domain = vm.final
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("result %+v, want %+v", got, tc.want)
			}
			if !slices.Equal(r.all(), tc.reports) {
				t.Errorf("reports %q, want %q", r.all(), tc.reports)
			}
			if len(sigs) != tc.unread {
				t.Errorf("%d signals unread, want %d", len(sigs), tc.unread)
			}
			select {
			case c := <-vm.calls:
				t.Errorf("unexpected call %s", c)
			default:
			}
		})
	}
}

// *launcher.Launcher is what the loop drives.
var _ VM = (*launcher.Launcher)(nil)
