//go:build qemu

// Tests against a real QEMU (TCG, no guest): `go test -tags qemu ./qmp/`.
package qmp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/digitalocean/go-qemu/qemu"
	goqmp "github.com/digitalocean/go-qemu/qmp"
	"golang.org/x/sys/unix"

	"github.com/kemu-dev/kemu/qmp"
)

func TestQEMUCapabilities(t *testing.T) {
	t.Parallel()
	p := startQEMU(t)
	m := p.monitor(p.qmpPath())
	ctx := stepCtx(t)

	g := m.Greeting()
	if want := binaryVersion(t); g.QMP.Version.String() != want {
		t.Errorf("greeting version %s, want %s (qemu-system-x86_64 --version)", g.QMP.Version, want)
	}
	if len(g.QMP.Capabilities) == 0 {
		t.Errorf("greeting has no capabilities: %+v", g)
	}
	t.Logf("QEMU %s (%s), capabilities %v", g.QMP.Version, g.QMP.Version.Package, g.QMP.Capabilities)

	v, err := m.QueryVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v != g.QMP.Version {
		t.Errorf("query-version %+v, greeting %+v", v, g.QMP.Version)
	}
	cmds, err := m.QueryCommands(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(cmds, func(c qmp.CommandInfo) bool { return c.Name == "query-status" }) || len(cmds) < 100 {
		t.Errorf("query-commands: %d commands, query-status missing or too few", len(cmds))
	}
	cpus, err := m.QueryCPUsFast(ctx)
	if err != nil || len(cpus) != 1 || cpus[0].ThreadID == 0 || cpus[0].Target != "x86_64" {
		t.Errorf("query-cpus-fast = %+v, %v", cpus, err)
	}
	if _, err := m.QueryBlockstats(ctx); err != nil {
		t.Errorf("query-blockstats: %v", err)
	}
	// No balloon device: a QEMU error reply, as *qmp.Error.
	var qe *qmp.Error
	if _, err := m.QueryBalloon(ctx); !errors.As(err, &qe) || qe.Command != "query-balloon" || qe.Class == "" {
		t.Errorf("query-balloon without a balloon: %v, want a *qmp.Error", err)
	}
	if mi, err := m.QueryMigrate(ctx); err != nil {
		t.Errorf("query-migrate: %v", err)
	} else if mi.Status != "" && mi.Status != "none" {
		t.Errorf("query-migrate status %q", mi.Status)
	}
	if m.Err() != nil {
		t.Errorf("Err() = %v on a live monitor", m.Err())
	}
}

// TestQEMUDialBusySocket: a QMP socket serves one client at a time; a
// second Dial gets no greeting and must give up when its context ends, then
// succeed once the first client left.
func TestQEMUDialBusySocket(t *testing.T) {
	t.Parallel()
	p := startQEMU(t)
	m := p.monitor(p.qmpPath())
	ctx := stepCtx(t)

	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	m2, err := qmp.Dial(short, p.qmpPath())
	if err == nil {
		m2.Close()
		t.Fatal("Dial of a busy QMP socket succeeded")
	}
	if d := time.Since(start); d > 2*time.Second || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Dial of a busy socket: %v after %s, want the context's deadline", err, d)
	}
	// Connect (no context) uses WithConnectTimeout.
	c, err := p.dialUnix(ctx, p.qmpPath())
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := qmp.New(c, qmp.WithConnectTimeout(300*time.Millisecond)).Connect(); err == nil {
		t.Error("Connect on a busy socket succeeded")
	} else if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Connect on a busy socket took %s: %v", d, err)
	}
	m.Close()
	m3 := p.monitor(p.qmpPath())
	if _, err := m3.QueryStatus(ctx); err != nil {
		t.Errorf("after the first client left: %v", err)
	}
}

// TestQEMUGoQemuDomain runs go-qemu's Domain on a Monitor. Unlike go-qemu's
// SocketMonitor, commands that emit events return even while nobody reads
// the event stream.
func TestQEMUGoQemuDomain(t *testing.T) {
	t.Parallel()
	p := startQEMU(t)
	m := p.monitor(p.qmpPath())
	ctx := stepCtx(t)

	d, err := qemu.NewDomain(m, "kemu-test")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	events, done, err := d.Events()
	if err != nil {
		t.Fatal(err)
	}
	if v, err := d.Version(); err != nil || v != binaryVersion(t) {
		t.Errorf("Domain.Version = %q, %v", v, err)
	}
	if st, err := d.Status(); err != nil || st != qemu.StatusPreLaunch {
		t.Errorf("Domain.Status = %v, %v; want StatusPreLaunch", st, err)
	}
	if ok, err := d.Supported("query-status"); err != nil || !ok {
		t.Errorf("Domain.Supported(query-status) = %v, %v", ok, err)
	}
	// Nobody reads events meanwhile.
	for _, cmd := range []string{"cont", "stop", "cont"} {
		if _, err := d.Run(goqmp.Command{Execute: cmd}); err != nil {
			t.Fatalf("Domain.Run(%s): %v", cmd, err)
		}
	}
	if st, err := d.Status(); err != nil || st != qemu.StatusRunning {
		t.Errorf("Domain.Status = %v, %v; want StatusRunning", st, err)
	}
	var names []string
	for len(names) < 3 {
		select {
		case e := <-events:
			names = append(names, e.Event)
		case <-ctx.Done():
			t.Fatalf("events so far %v: %v", names, ctx.Err())
		}
	}
	if !slices.Equal(names, []string{"RESUME", "STOP", "RESUME"}) {
		t.Errorf("Domain.Events: %v", names)
	}
	done <- struct{}{}
}

func TestQEMUStatusStopCont(t *testing.T) {
	t.Parallel()
	p := startQEMU(t)
	m := p.monitor(p.qmpPath())
	ctx := stepCtx(t)

	sub := m.Subscribe(qmp.WithFilter(qmp.AnyOf("STOP", "RESUME")))
	defer sub.Close()
	goEvents, err := m.Events(ctx) // go-qemu's interface, fed since connect
	if err != nil {
		t.Fatal(err)
	}

	checkStatus := func(want string) {
		t.Helper()
		st, err := m.QueryStatus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Status != want || st.Running != (want == "running") {
			t.Errorf("query-status = %+v, want %s", st, want)
		}
	}
	nextGoEvent := func(name string) goqmp.Event {
		t.Helper()
		for {
			select {
			case e, ok := <-goEvents:
				if !ok {
					t.Fatalf("Events channel closed before %s", name)
				}
				if e.Event == name {
					return e
				}
				t.Logf("Events: skipping %s", e.Event)
			case <-ctx.Done():
				t.Fatalf("Events: no %s: %v", name, ctx.Err())
			}
		}
	}

	checkStatus("prelaunch")

	if err := m.Cont(ctx); err != nil {
		t.Fatal(err)
	}
	e, err := sub.Next(ctx)
	if err != nil || e.Name != "RESUME" {
		t.Fatalf("after cont: %+v, %v; want RESUME", e, err)
	}
	if e.Timestamp.IsZero() || time.Since(e.Timestamp) > time.Minute || !json.Valid(e.Raw) {
		t.Errorf("RESUME event: timestamp %v, raw %s", e.Timestamp, e.Raw)
	}
	ge := nextGoEvent("RESUME")
	if ge.Timestamp.Seconds == 0 {
		t.Errorf("go-qemu RESUME event without timestamp: %+v", ge)
	}
	checkStatus("running")

	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	e, err = sub.Wait(ctx, qmp.Match("STOP"))
	if err != nil || e.Name != "STOP" {
		t.Fatalf("after stop: %+v, %v; want STOP", e, err)
	}
	nextGoEvent("STOP")
	checkStatus("paused")

	// A late subscription still sees both, with SinceConnect.
	late := m.Subscribe(qmp.SinceConnect(), qmp.WithFilter(qmp.AnyOf("STOP", "RESUME")))
	defer late.Close()
	var names []string
	for range 2 {
		e, err := late.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, e.Name)
	}
	if !slices.Equal(names, []string{"RESUME", "STOP"}) {
		t.Errorf("SinceConnect replay: %v, want [RESUME STOP]", names)
	}

	// ExecuteWait: the event a command causes, race-free.
	ev, err := m.ExecuteWait(ctx, "cont", nil, nil, qmp.Match("RESUME"))
	if err != nil || ev.Name != "RESUME" {
		t.Errorf("ExecuteWait(cont) = %+v, %v", ev, err)
	}
	checkStatus("running")
	// SystemReset: RESET event.
	ev, err = m.ExecuteWait(ctx, "system_reset", nil, nil, qmp.Match("RESET"))
	if err != nil || ev.String("guest") != "false" || ev.String("reason") != "host-qmp-system-reset" {
		t.Errorf("ExecuteWait(system_reset) = %+v, %v", ev, err)
	}

	// A subscription that falls behind is told how many events it lost.
	small := m.Subscribe(qmp.WithBuffer(2), qmp.WithFilter(qmp.AnyOf("STOP", "RESUME")))
	defer small.Close()
	all := m.Subscribe(qmp.WithFilter(qmp.AnyOf("STOP", "RESUME")))
	defer all.Close()
	for range 3 {
		if err := m.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if err := m.Cont(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 6 { // all six have arrived once the big subscription has them
		if _, err := all.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var lost *qmp.EventsLostError
	if _, err := small.Next(ctx); !errors.As(err, &lost) || lost.Count != 4 {
		t.Errorf("small subscription: %v, want EventsLostError{4}", err)
	}
	e1, err1 := small.Next(ctx)
	e2, err2 := small.Next(ctx)
	if err1 != nil || err2 != nil || e1.Name != "STOP" || e2.Name != "RESUME" {
		t.Errorf("small subscription after the loss: %s %v, %s %v", e1.Name, err1, e2.Name, err2)
	}
}

func TestQEMUQuerySchema(t *testing.T) {
	t.Parallel()
	p := startQEMU(t)
	m := p.monitor(p.qmpPath())
	ctx := stepCtx(t)

	schema, err := m.QueryQMPSchema(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(schema) <= 64<<10 || !json.Valid(schema) {
		t.Fatalf("query-qmp-schema: %d bytes (valid JSON %v), want > 64 KiB", len(schema), json.Valid(schema))
	}
	var entries []struct {
		Name     string `json:"name"`
		MetaType string `json:"meta-type"`
	}
	if err := json.Unmarshal(schema, &entries); err != nil || len(entries) < 500 {
		t.Fatalf("query-qmp-schema: %d entries, %v", len(entries), err)
	}
	t.Logf("query-qmp-schema: %d bytes, %d entries", len(schema), len(entries))
	if st, err := m.QueryStatus(ctx); err != nil || st.Status != "prelaunch" {
		t.Fatalf("query-status after the schema: %+v, %v", st, err)
	}
	// Twice more, interleaved with small calls from other goroutines.
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			s, err := m.QueryQMPSchema(ctx)
			if err != nil || !bytes.Equal(s, schema) {
				t.Errorf("query-qmp-schema again: %d bytes, %v", len(s), err)
			}
		})
		wg.Go(func() {
			if _, err := m.QueryStatus(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()

	// A limit below the reply ends the connection with a clear error.
	small := p.monitor(p.qmp2Path(), qmp.WithMaxMessageSize(64<<10))
	_, err = small.QueryQMPSchema(ctx)
	wantClosed(t, "query-qmp-schema over WithMaxMessageSize(64 KiB)", err)
	if err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("error does not say why: %v", err)
	}
}

func TestQEMUConcurrentQueryStatus(t *testing.T) {
	t.Parallel()
	p := startQEMU(t)
	m := p.monitor(p.qmpPath())
	ctx := stepCtx(t)

	// A toggler stops and resumes the machine while the queries run.
	stopToggler := make(chan struct{})
	toggles := make(chan int, 1)
	go func() {
		n := 0
		defer func() { toggles <- n }()
		for {
			select {
			case <-stopToggler:
				return
			default:
			}
			if err := m.Cont(ctx); err != nil {
				t.Errorf("cont: %v", err)
				return
			}
			if err := m.Stop(ctx); err != nil {
				t.Errorf("stop: %v", err)
				return
			}
			n++
		}
	}()

	const goroutines, perGoroutine = 50, 4
	var ok atomic.Int64
	var seen sync.Map
	var wg sync.WaitGroup
	start := time.Now()
	for range goroutines {
		wg.Go(func() {
			for range perGoroutine {
				st, err := m.QueryStatus(ctx)
				if err != nil {
					t.Errorf("query-status: %v", err)
					return
				}
				switch {
				case st.Status == "running" && st.Running,
					(st.Status == "paused" || st.Status == "prelaunch") && !st.Running:
					ok.Add(1)
					seen.Store(st.Status, true)
				default:
					t.Errorf("query-status: not a valid StatusInfo: %+v", st)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(stopToggler)
	n := <-toggles
	if ok.Load() != goroutines*perGoroutine {
		t.Errorf("%d of %d queries answered correctly", ok.Load(), goroutines*perGoroutine)
	}
	var states []string
	seen.Range(func(k, _ any) bool { states = append(states, k.(string)); return true })
	slices.Sort(states)
	t.Logf("%d query-status from %d goroutines in %s, %d stop/cont toggles meanwhile, states seen %v",
		ok.Load(), goroutines, elapsed.Round(time.Millisecond), n, states)
	if m.Err() != nil {
		t.Errorf("monitor ended: %v", m.Err())
	}
}

func TestQEMUQuit(t *testing.T) {
	t.Parallel()
	p := startQEMU(t)
	m, hc := p.hookMonitor(p.qmpPath())
	ctx := stepCtx(t)
	sub := m.Subscribe(qmp.WithFilter(qmp.Match("SHUTDOWN")))

	// Freeze QEMU so that what we send stays unread: quit first, then calls
	// that QEMU will never answer since it exits after quit.
	written := make(chan string, 64)
	hc.set(func(h *hookConn) {
		h.onWrite = func(b []byte) {
			var r struct {
				Execute string `json:"execute"`
			}
			_ = json.Unmarshal(b, &r)
			written <- r.Execute
		}
	})
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	quitErr := make(chan error, 1)
	go func() { quitErr <- m.Quit(ctx) }()
	if w := <-written; w != "quit" {
		t.Fatalf("wrote %q", w)
	}
	const pending = 8
	errs := make(chan error, pending)
	for i := range pending {
		go func() {
			var err error
			if i%2 == 0 {
				_, err = m.QueryQMPSchema(ctx)
			} else {
				_, err = m.QueryStatus(ctx)
			}
			errs <- err
		}()
	}
	for range pending {
		<-written
	}
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}

	if err := <-quitErr; err != nil {
		t.Errorf("Quit = %v, want nil", err)
	}
	select {
	case <-m.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done() not closed 5 s after quit")
	}
	wantClosed(t, "Err() after quit", m.Err())
	failed := 0
	for range pending {
		if err := <-errs; err != nil {
			failed++
			wantClosed(t, "a call pending at quit", err)
		}
	}
	t.Logf("%d of %d calls sent after quit ended with an error (the rest were answered); Err() = %v", failed, pending, m.Err())
	if failed == 0 {
		t.Errorf("no call sent after quit was left pending")
	}

	// Everything later fails at once.
	start := time.Now()
	_, err := m.QueryStatus(ctx)
	wantClosed(t, "query-status after quit", err)
	wantClosed(t, "stop after quit", m.Stop(ctx))
	_, err = m.RunRaw(ctx, []byte(`{"execute":"query-status"}`))
	wantClosed(t, "RunRaw after quit", err)
	_, err = m.Run([]byte(`{"execute":"query-status"}`))
	wantClosed(t, "Run after quit", err)
	if _, err := m.Events(ctx); err == nil {
		t.Errorf("Events after quit: no error")
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("calls after quit took %s", d)
	}

	// The subscription has QEMU's SHUTDOWN, then the end.
	e, err := sub.Next(ctx)
	if err != nil || e.String("reason") != "host-qmp-quit" {
		t.Errorf("subscription after quit: %+v, %v; want SHUTDOWN reason host-qmp-quit", e, err)
	}
	_, err = sub.Next(ctx)
	wantClosed(t, "subscription Next after the end", err)
	late := m.Subscribe()
	_, err = late.Next(ctx)
	wantClosed(t, "Next of a subscription made after the end", err)

	if err := p.waitExit(stepTimeout); err != nil {
		t.Errorf("QEMU exit after quit: %v", err)
	}
}

func TestQEMUKillDuringCall(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		call func(context.Context, *qmp.Monitor) error
	}{
		{"query-qmp-schema", func(ctx context.Context, m *qmp.Monitor) error { _, err := m.QueryQMPSchema(ctx); return err }},
		{"query-status", func(ctx context.Context, m *qmp.Monitor) error { _, err := m.QueryStatus(ctx); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := startQEMU(t)
			m := p.monitor(p.qmpPath())
			ctx := stepCtx(t)
			sub := m.Subscribe()

			var calls atomic.Int64
			var wg sync.WaitGroup
			defer wg.Wait()
			type result struct {
				err error
				at  time.Time
			}
			done := make(chan result, 1)
			for range 4 {
				wg.Go(func() {
					for {
						if err := tc.call(ctx, m); err != nil {
							select {
							case done <- result{err, time.Now()}:
							default:
							}
							// Every later call fails too, at once.
							start := time.Now()
							err2 := tc.call(ctx, m)
							if time.Since(start) > 100*time.Millisecond {
								t.Errorf("a call after the end took %s", time.Since(start))
							}
							wantClosed(t, "a call after the kill", err2)
							return
						}
						calls.Add(1)
					}
				})
			}
			// Let the loop run a little, then SIGKILL QEMU mid-stream.
			deadline := time.Now().Add(stepTimeout)
			for calls.Load() < 20 && time.Now().Before(deadline) {
				if _, err := m.QueryVersion(ctx); err != nil {
					t.Fatal(err)
				}
			}
			killed := time.Now()
			if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			select {
			case r := <-done:
				d := r.at.Sub(killed)
				t.Logf("%d calls before the kill; the first failed %s after it: %v", calls.Load(), d, r.err)
				if d > time.Second {
					t.Errorf("call failed %s after the kill, want < 1 s", d)
				}
				wantClosed(t, "the call in flight at the kill", r.err)
			case <-time.After(time.Second):
				t.Fatalf("no call failed within 1 s of the kill")
			}
			select {
			case <-m.Done():
			case <-time.After(time.Second):
				t.Fatalf("Done() not closed 1 s after the kill")
			}
			wantClosed(t, "Err() after the kill", m.Err())
			_, err := sub.Next(ctx)
			wantClosed(t, "subscription Next after the kill", err)
		})
	}
}

// TestQEMUWriteAfterPeerDied: a call whose write fails because QEMU died
// before the reader noticed must still fail with an error wrapping
// ErrClosed, like every other call on an ended connection.
func TestQEMUWriteAfterPeerDied(t *testing.T) {
	t.Parallel()
	p := startQEMU(t)
	m, hc := p.hookMonitor(p.qmpPath())
	ctx := stepCtx(t)
	if _, err := m.QueryStatus(ctx); err != nil {
		t.Fatal(err)
	}
	// Hold the reader when its read returns (the EOF of the kill) until the
	// call below has written.
	holding := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	hc.set(func(h *hookConn) {
		h.afterRead = func(n int, err error) {
			if err != nil {
				once.Do(func() { close(holding) })
				<-release
			}
		}
	})
	defer close(release)
	p.kill()
	select {
	case <-holding:
	case <-ctx.Done():
		t.Fatal("the reader saw no EOF")
	}
	_, err := m.QueryStatus(ctx)
	wantClosed(t, "a call written after QEMU died (reader not yet at EOF)", err)
	wantClosed(t, "Err()", m.Err())
}

// TestQEMUCanceledCallKeepsConnection: a call canceled just as its write
// completes must not break the next caller's write. conn.write arms
// context.AfterFunc(ctx, SetWriteDeadline(now)); if that function is already
// running when write returns, stop() does not wait for it, and it can set
// the deadline after the next writer cleared it: that writer then fails
// with a timeout its own context never had, and conn.write ends the whole
// connection. The hooks below force exactly that interleaving.
func TestQEMUCanceledCallKeepsConnection(t *testing.T) {
	t.Parallel()
	p := startQEMU(t)
	m, hc := p.hookMonitor(p.qmpPath())
	ctx := stepCtx(t)

	aWriting := make(chan struct{})
	afterFuncStarted := make(chan struct{})
	gate := make(chan struct{})
	applied := make(chan struct{})
	var onceA, onceF, onceB sync.Once
	hc.set(func(h *hookConn) {
		h.onWrite = func(b []byte) {
			switch {
			case bytes.Contains(b, []byte(`"query-version"`)):
				onceA.Do(func() {
					close(aWriting)
					<-afterFuncStarted // A's context was canceled during its write
				})
			case bytes.Contains(b, []byte(`"query-status"`)):
				onceB.Do(func() {
					close(gate) // let A's AfterFunc apply its deadline now
					select {
					case <-applied:
					case <-time.After(5 * time.Second): // fixed code: nothing to wait for
					}
				})
			}
		}
		h.onSetWriteDeadline = func(d time.Time, set func() error) error {
			if d.IsZero() || d.After(time.Now()) {
				return set()
			}
			// A deadline in the past: context.AfterFunc of a canceled call.
			first := false
			onceF.Do(func() { first = true })
			if !first {
				return set()
			}
			close(afterFuncStarted)
			select {
			case <-gate:
			case <-time.After(time.Second): // fixed code waits for this function: do not deadlock it
			}
			err := set()
			close(applied)
			return err
		}
	})

	ctxA, cancelA := context.WithCancel(context.Background())
	aDone := make(chan error, 1)
	go func() { _, err := m.QueryVersion(ctxA); aDone <- err }()
	<-aWriting
	cancelA()
	select {
	case err := <-aDone:
		t.Logf("canceled call: %v", err)
	case <-ctx.Done():
		t.Fatal("the canceled call did not return")
	}

	bctx, cancelB := context.WithCancel(context.Background()) // no deadline of its own
	defer cancelB()
	go func() {
		select {
		case <-ctx.Done():
			cancelB()
		case <-bctx.Done():
		}
	}()
	if _, err := m.QueryStatus(bctx); err != nil {
		t.Errorf("a call after a canceled one: %v", err)
	}
	if err := m.Err(); err != nil {
		t.Errorf("the connection ended: %v", err)
	}
}

func TestQEMUFDPassing(t *testing.T) {
	t.Parallel()
	p := startQEMU(t)
	m := p.monitor(p.qmpPath())
	ctx := stepCtx(t)

	// getfd + closefd with a pipe end.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if err := m.GetFD(ctx, "pipe0", w); err != nil {
		t.Fatalf("getfd: %v", err)
	}
	if err := m.CloseFD(ctx, "pipe0"); err != nil {
		t.Fatalf("closefd: %v", err)
	}
	var qe *qmp.Error
	if err := m.CloseFD(ctx, "pipe0"); !errors.As(err, &qe) {
		t.Errorf("closefd of a closed name: %v, want a *qmp.Error", err)
	}
	// The caller keeps its file.
	if _, err := w.Write([]byte("x")); err != nil {
		t.Errorf("the pipe after getfd: %v", err)
	}

	// getfd of a datagram socket, used by a socket netdev: QEMU really got it.
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	s0, s1 := os.NewFile(uintptr(fds[0]), "s0"), os.NewFile(uintptr(fds[1]), "s1")
	defer s0.Close()
	defer s1.Close()
	if err := m.GetFD(ctx, "sock0", s0); err != nil {
		t.Fatalf("getfd: %v", err)
	}
	if err := m.NetdevAdd(ctx, map[string]any{"type": "socket", "id": "fdnet", "fd": "sock0"}); err != nil {
		t.Fatalf("netdev_add socket fd=sock0: %v", err)
	}
	if out, err := m.HumanMonitorCommand(ctx, "info network"); err != nil || !strings.Contains(out, "fdnet") {
		t.Errorf("info network = %q, %v; want fdnet", out, err)
	}
	if err := m.NetdevDel(ctx, "fdnet"); err != nil {
		t.Errorf("netdev_del: %v", err)
	}

	// add-fd into a new fd set, listed by query-fdsets and usable as
	// /dev/fdset/N by a block node.
	img := filepath.Join(p.dir, "fdset.img")
	f, err := os.OpenFile(img, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(1 << 20); err != nil {
		t.Fatal(err)
	}
	info, err := m.AddFD(ctx, nil, "kemu-test", f)
	if err != nil {
		t.Fatalf("add-fd: %v", err)
	}
	t.Logf("add-fd: %+v", info)
	var sets []struct {
		FDSetID int `json:"fdset-id"`
		FDs     []struct {
			FD     int    `json:"fd"`
			Opaque string `json:"opaque"`
		} `json:"fds"`
	}
	if err := m.Execute(ctx, "query-fdsets", nil, &sets); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range sets {
		for _, fd := range s.FDs {
			if s.FDSetID == info.FDSetID && fd.FD == info.FD && fd.Opaque == "kemu-test" {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("query-fdsets = %+v, want set %d with fd %d", sets, info.FDSetID, info.FD)
	}
	// A second fd into the same set.
	f2, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	id := info.FDSetID
	info2, err := m.AddFD(ctx, &id, "", f2)
	if err != nil || info2.FDSetID != id || info2.FD == info.FD {
		t.Errorf("add-fd into set %d: %+v, %v", id, info2, err)
	}
	node := map[string]any{"driver": "file", "node-name": "fdfile", "filename": fmt.Sprintf("/dev/fdset/%d", id)}
	if err := m.BlockdevAdd(ctx, node); err != nil {
		t.Errorf("blockdev-add on /dev/fdset/%d: %v", id, err)
	} else if err := m.BlockdevDel(ctx, "fdfile"); err != nil {
		t.Errorf("blockdev-del: %v", err)
	}
	// QEMU closes removed fds only while the machine runs (7.2:
	// monitor_fdset_cleanup checks runstate_is_running()).
	if err := m.Cont(ctx); err != nil {
		t.Fatal(err)
	}
	fd2 := info2.FD
	if err := m.RemoveFD(ctx, id, &fd2); err != nil {
		t.Errorf("remove-fd one fd: %v", err)
	}
	if err := m.RemoveFD(ctx, id, nil); err != nil {
		t.Errorf("remove-fd the set: %v", err)
	}
	sets = nil
	if err := m.Execute(ctx, "query-fdsets", nil, &sets); err != nil {
		t.Fatal(err)
	}
	for _, s := range sets {
		if s.FDSetID == id {
			t.Errorf("fd set %d still listed after remove-fd: %+v", id, s)
		}
	}

	// Files need a unix socket: a clear error, not a hang (the second monitor
	// over a wrapped connection).
	hm, _ := p.hookMonitor(p.qmp2Path())
	if err := hm.GetFD(ctx, "x", w); err == nil || !strings.Contains(err.Error(), "unix socket") {
		t.Errorf("getfd over a non-unix connection: %v", err)
	}
}

func TestQEMURunRaw(t *testing.T) {
	t.Parallel()
	p := startQEMU(t)
	ctx := stepCtx(t)
	// go-qemu's way: New + Connect.
	c, err := p.dialUnix(ctx, p.qmpPath())
	if err != nil {
		t.Fatal(err)
	}
	var gm goqmp.Monitor = qmp.New(c, qmp.WithConnectTimeout(stepTimeout))
	if err := gm.Connect(); err != nil {
		t.Fatal(err)
	}
	defer gm.Disconnect()
	m := gm.(*qmp.Monitor)

	type reply struct {
		Return *struct {
			Status string `json:"status"`
		} `json:"return"`
		Error *struct {
			Class string `json:"class"`
			Desc  string `json:"desc"`
		} `json:"error"`
		ID json.RawMessage `json:"id"`
	}
	decode := func(b []byte) (r reply) {
		t.Helper()
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("reply %s: %v", b, err)
		}
		return r
	}

	out, err := m.RunRaw(ctx, []byte(`{"execute":"query-status","id":"mine"}`))
	if err != nil {
		t.Fatal(err)
	}
	if r := decode(out); string(r.ID) != `"mine"` || r.Return == nil || r.Return.Status != "prelaunch" {
		t.Errorf("RunRaw query-status id mine: %s", out)
	}
	out, err = m.RunRaw(ctx, []byte(`{"execute":"query-status","id":42}`))
	if r := decode(out); err != nil || string(r.ID) != `42` {
		t.Errorf("RunRaw with id 42: %s, %v", out, err)
	}
	out, err = m.RunRaw(ctx, []byte(` {"execute": "query-status"} `))
	if r := decode(out); err != nil || r.ID != nil || r.Return == nil {
		t.Errorf("RunRaw without id: %s, %v (want no id)", out, err)
	}
	out, err = m.RunRaw(ctx, []byte(`{"execute":"no-such-command","id":"x1"}`))
	if err != nil {
		t.Fatalf("RunRaw of an unknown command: Go error %v, want the error reply", err)
	}
	if r := decode(out); r.Error == nil || r.Error.Class != "CommandNotFound" || string(r.ID) != `"x1"` {
		t.Errorf("RunRaw unknown command: %s", out)
	}
	out, err = m.RunRaw(ctx, []byte(`{"execute":"human-monitor-command","arguments":{"command-line":"info version"}}`))
	var hr struct {
		Return string `json:"return"`
	}
	if err != nil || json.Unmarshal(out, &hr) != nil || !strings.HasPrefix(hr.Return, binaryVersion(t)) {
		t.Errorf("RunRaw with arguments: %s, %v", out, err)
	}
	for _, bad := range []string{``, `[]`, `{"execute":`, `{"arguments":{}}`, `{"execute":""}`} {
		if out, err := m.RunRaw(ctx, []byte(bad)); err == nil {
			t.Errorf("RunRaw(%q) = %s, want a Go error", bad, out)
		}
	}

	// go-qemu's Run: an error reply is a Go error.
	cmd, _ := json.Marshal(goqmp.Command{Execute: "no-such-command"})
	if out, err := gm.Run(cmd); err == nil || !qmp.IsCommandNotFound(err) {
		t.Errorf("Run unknown command = %s, %v; want a CommandNotFound error", out, err)
	} else {
		var qe *qmp.Error
		if errors.As(err, &qe) && qe.Command != "no-such-command" {
			t.Errorf("Run error names command %q", qe.Command)
		}
	}
	cmd, _ = json.Marshal(goqmp.Command{Execute: "query-version"})
	out, err = gm.Run(cmd)
	var vr struct {
		Return qmp.VersionInfo `json:"return"`
	}
	if err != nil || json.Unmarshal(out, &vr) != nil || vr.Return.String() != binaryVersion(t) {
		t.Errorf("Run query-version = %s, %v", out, err)
	}
	if m.Err() != nil {
		t.Errorf("monitor ended: %v", m.Err())
	}
}

func TestQEMUHotplug(t *testing.T) {
	t.Parallel()
	p := startQEMU(t, "-device", "qemu-xhci,id=xhci")
	m := p.monitor(p.qmpPath())
	ctx := stepCtx(t)

	peripherals := func() []string {
		t.Helper()
		var props []struct {
			Name string `json:"name"`
		}
		if err := m.Execute(ctx, "qom-list", map[string]any{"path": "/machine/peripheral"}, &props); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range props {
			names = append(names, p.Name)
		}
		return names
	}

	t.Run("usb-tablet", func(t *testing.T) {
		// USB on xHCI unplugs without the guest's help (the machine is not even running).
		if err := m.DeviceAdd(ctx, "usb-tablet", "tab0", map[string]any{"bus": "xhci.0"}); err != nil {
			t.Fatalf("device_add: %v", err)
		}
		if !slices.Contains(peripherals(), "tab0") {
			t.Fatalf("tab0 not in /machine/peripheral: %v", peripherals())
		}
		var qe *qmp.Error
		if err := m.DeviceAdd(ctx, "usb-tablet", "tab0", map[string]any{"bus": "xhci.0"}); !errors.As(err, &qe) {
			t.Errorf("device_add of a duplicate id: %v, want a *qmp.Error", err)
		}
		if err := m.DeviceDel(ctx, "tab0"); err != nil {
			t.Fatalf("device_del: %v", err)
		}
		if slices.Contains(peripherals(), "tab0") {
			t.Errorf("tab0 still in /machine/peripheral: %v", peripherals())
		}
		if err := m.DeviceDel(ctx, "tab0"); !errors.As(err, &qe) {
			t.Errorf("device_del of a missing device: %v, want a *qmp.Error", err)
		}
	})

	t.Run("blockdev", func(t *testing.T) {
		nodes := func() []string {
			var ns []struct {
				NodeName string `json:"node-name"`
			}
			if err := m.Execute(ctx, "query-named-block-nodes", map[string]any{"flat": true}, &ns); err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, n := range ns {
				names = append(names, n.NodeName)
			}
			return names
		}
		if err := m.BlockdevAdd(ctx, map[string]any{"driver": "null-co", "node-name": "null0", "size": 1 << 20}); err != nil {
			t.Fatalf("blockdev-add null-co: %v", err)
		}
		img := filepath.Join(p.dir, "f.img")
		if err := os.WriteFile(img, make([]byte, 1<<16), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := m.BlockdevAdd(ctx, map[string]any{
			"driver": "raw", "node-name": "raw0",
			"file": map[string]any{"driver": "file", "node-name": "file0", "filename": img},
		}); err != nil {
			t.Fatalf("blockdev-add raw/file: %v", err)
		}
		if got := nodes(); !slices.Contains(got, "null0") || !slices.Contains(got, "raw0") || !slices.Contains(got, "file0") {
			t.Errorf("query-named-block-nodes = %v", got)
		}
		var qe *qmp.Error
		if err := m.BlockdevAdd(ctx, map[string]any{"driver": "null-co", "node-name": "null0"}); !errors.As(err, &qe) {
			t.Errorf("blockdev-add of a duplicate node: %v", err)
		}
		for _, n := range []string{"null0", "raw0"} {
			if err := m.BlockdevDel(ctx, n); err != nil {
				t.Errorf("blockdev-del %s: %v", n, err)
			}
		}
		if got := nodes(); len(got) != 0 {
			t.Errorf("nodes left: %v", got)
		}
	})

	t.Run("netdev", func(t *testing.T) {
		if err := m.NetdevAdd(ctx, map[string]any{"type": "user", "id": "n0", "restrict": true}); err != nil {
			t.Fatalf("netdev_add user: %v", err)
		}
		out, err := m.HumanMonitorCommand(ctx, "info network")
		if err != nil || !strings.Contains(out, "n0") {
			t.Errorf("info network = %q, %v", out, err)
		}
		if err := m.NetdevDel(ctx, "n0"); err != nil {
			t.Errorf("netdev_del: %v", err)
		}
		if out, _ := m.HumanMonitorCommand(ctx, "info network"); strings.Contains(out, "n0") {
			t.Errorf("info network after netdev_del = %q", out)
		}
	})

	t.Run("object", func(t *testing.T) {
		if err := m.Execute(ctx, "object-add", map[string]any{"qom-type": "memory-backend-ram", "id": "mem0", "size": 1 << 20}, nil); err != nil {
			t.Fatalf("object-add: %v", err)
		}
		if err := m.Execute(ctx, "object-del", map[string]any{"id": "mem0"}, nil); err != nil {
			t.Errorf("object-del: %v", err)
		}
	})
}
