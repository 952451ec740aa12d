package qmp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// hangLimit bounds every wait in these tests: they catch hangs, not speed.
const hangLimit = 10 * time.Second

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	t.Cleanup(cancel)
	return ctx
}

// connected returns a monitor that completed the handshake with a fake.
func connected(t *testing.T, opts ...Option) (*Monitor, *fakeQEMU) {
	t.Helper()
	c, f := newFake(t)
	m := New(c, opts...)
	errc := make(chan error, 1)
	go func() { errc <- m.ConnectContext(ctxT(t)) }()
	f.handshake()
	if err := <-errc; err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return m, f
}

// async runs fn in a goroutine and returns its error on a channel.
func async(fn func() error) <-chan error {
	c := make(chan error, 1)
	go func() { c <- fn() }()
	return c
}

func waitErr(t *testing.T, c <-chan error) error {
	t.Helper()
	select {
	case err := <-c:
		return err
	case <-time.After(hangLimit):
		t.Fatal("call hung")
		return nil
	}
}

func TestConnectKeepsEventsAroundTheHandshake(t *testing.T) {
	c, f := newFake(t)
	m := New(c)
	defer m.Close()
	done := async(func() error { return m.ConnectContext(ctxT(t)) })
	f.send(greetingLine)
	f.event("EARLY", `{"n": 1}`) // right after the greeting
	req := f.recv()
	f.event("BETWEEN", `{"n": 2}`) // between qmp_capabilities and its reply
	f.reply(req, "{}")
	if err := waitErr(t, done); err != nil {
		t.Fatal(err)
	}
	if v := m.Greeting().QMP.Version.String(); v != "7.2.22" {
		t.Errorf("greeting version %q", v)
	}
	sub := m.Subscribe(SinceConnect())
	defer sub.Close()
	for _, want := range []string{"EARLY", "BETWEEN"} {
		e, err := sub.Next(ctxT(t))
		if err != nil || e.Name != want {
			t.Fatalf("event %q %v, want %s", e.Name, err, want)
		}
	}
	f.event("LATER", `{}`)
	if e, err := sub.Next(ctxT(t)); err != nil || e.Name != "LATER" || e.Timestamp.Unix() != 1700000000 {
		t.Fatalf("event %+v %v", e, err)
	}
}

func TestConnectTimesOutWithoutGreeting(t *testing.T) {
	c, _ := newFake(t)
	m := New(c)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := m.ConnectContext(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want deadline", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("took %s", time.Since(start))
	}
	if err := m.Execute(ctxT(t), "query-status", nil, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("call after failed connect: %v", err)
	}
}

func TestRepliesMatchedByID(t *testing.T) {
	m, f := connected(t)
	var a, b StatusInfo
	ea := async(func() error { return m.Execute(ctxT(t), "query-status", nil, &a) })
	ra := f.recv()
	eb := async(func() error { return m.Execute(ctxT(t), "query-status", nil, &b) })
	rb := f.recv()
	if string(ra.ID) == string(rb.ID) {
		t.Fatalf("two commands share id %s", ra.ID)
	}
	// Answer the second first, with an event in between.
	f.reply(rb, `{"status": "paused", "running": false}`)
	f.event("STOP", `{}`)
	f.reply(ra, `{"status": "running", "running": true}`)
	if err := waitErr(t, ea); err != nil || a.Status != "running" {
		t.Errorf("first: %+v %v", a, err)
	}
	if err := waitErr(t, eb); err != nil || b.Status != "paused" {
		t.Errorf("second: %+v %v", b, err)
	}
}

func TestReplySplitAcrossReadsAndHuge(t *testing.T) {
	m, f := connected(t)
	big := strings.Repeat("x", 300<<10) // query-qmp-schema is ~207 KB on QEMU 7.2
	var got string
	done := async(func() error { return m.Execute(ctxT(t), "query-qmp-schema", nil, &got) })
	req := f.recv()
	line := `{"return": "` + big + `", "id": ` + string(req.ID) + "}\r\n"
	for _, piece := range []string{line[:7], line[7:100000], line[100000 : len(line)-1], line[len(line)-1:]} {
		f.send(piece)
	}
	if err := waitErr(t, done); err != nil || got != big {
		t.Fatalf("huge reply: %d bytes, %v", len(got), err)
	}
	// A small reply split in the middle of a token, and the monitor goes on.
	var s StatusInfo
	done = async(func() error { return m.Execute(ctxT(t), "query-status", nil, &s) })
	req = f.recv()
	line = `{"return": {"status": "running", "running": true}, "id": ` + string(req.ID) + "}\n"
	f.send(line[:20])
	f.send(line[20:])
	if err := waitErr(t, done); err != nil || !s.Running {
		t.Fatalf("split reply: %+v %v", s, err)
	}
}

func TestQMPErrorReply(t *testing.T) {
	m, f := connected(t)
	done := async(func() error { return m.Execute(ctxT(t), "nope", nil, nil) })
	req := f.recv()
	f.send(`{"error": {"class": "CommandNotFound", "desc": "The command nope has not been found"}, "id": ` + string(req.ID) + "}\n")
	err := waitErr(t, done)
	var qe *Error
	if !errors.As(err, &qe) || qe.Class != "CommandNotFound" || qe.Command != "nope" || !IsCommandNotFound(err) {
		t.Fatalf("err %#v", err)
	}
	if m.Err() != nil {
		t.Error("an error reply must not end the connection")
	}
}

func TestTimeoutLeavesMonitorUsable(t *testing.T) {
	m, f := connected(t)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	done := async(func() error { return m.Execute(ctx, "query-migrate", nil, nil) })
	stale := f.recv() // never answered in time
	if err := waitErr(t, done); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want deadline", err)
	}
	// The late reply to the abandoned command is dropped, not given to the
	// next command.
	f.reply(stale, `{"status": "stale"}`)
	var s StatusInfo
	next := async(func() error { return m.Execute(ctxT(t), "query-status", nil, &s) })
	f.reply(f.recv(), `{"status": "running"}`)
	if err := waitErr(t, next); err != nil || s.Status != "running" {
		t.Fatalf("after timeout: %+v %v", s, err)
	}
}

func TestGarbageEndsEverything(t *testing.T) {
	m, f := connected(t)
	sub := m.Subscribe()
	pend := async(func() error { return m.Execute(ctxT(t), "query-status", nil, nil) })
	f.recv()
	f.send("this is not json\n")
	err := waitErr(t, pend)
	var pe *ProtocolError
	if !errors.Is(err, ErrClosed) || !errors.As(err, &pe) {
		t.Fatalf("pending call: %v", err)
	}
	start := time.Now()
	if err := m.Execute(ctxT(t), "query-status", nil, nil); !errors.Is(err, ErrClosed) || time.Since(start) > time.Second {
		t.Fatalf("later call: %v after %s", err, time.Since(start))
	}
	if _, err := sub.Next(ctxT(t)); !errors.Is(err, ErrClosed) {
		t.Fatalf("subscription: %v", err)
	}
	select {
	case <-m.Done():
	case <-time.After(hangLimit):
		t.Fatal("Done not closed")
	}
}

func TestAbruptCloseEndsPendingCalls(t *testing.T) {
	m, f := connected(t)
	const n = 5
	errs := make([]<-chan error, n)
	for i := range errs {
		errs[i] = async(func() error { return m.Execute(ctxT(t), "query-status", nil, nil) })
		f.recv()
	}
	ev, err := m.Events(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	f.close()
	for i, c := range errs {
		if err := waitErr(t, c); !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "closed the connection") {
			t.Errorf("call %d: %v", i, err)
		}
	}
	select {
	case _, ok := <-ev:
		if ok {
			t.Error("event channel delivered instead of closing")
		}
	case <-time.After(hangLimit):
		t.Error("Events channel not closed")
	}
}

func TestSlowSubscriberLosesEventsReaderGoesOn(t *testing.T) {
	m, f := connected(t)
	slow := m.Subscribe(WithBuffer(4)) // never read until the end
	defer slow.Close()
	fast := m.Subscribe(WithFilter(Match("TICK", "n", "99")))
	defer fast.Close()
	for i := 0; i < 100; i++ {
		f.event("TICK", fmt.Sprintf(`{"n": %d}`, i))
	}
	// The reader was not held up: a command is still answered.
	f.serve(func(fakeRequest) string { return `{"status": "running"}` })
	if _, err := m.QueryStatus(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if e, err := fast.Next(ctxT(t)); err != nil || e.String("n") != "99" {
		t.Fatalf("filtered subscription: %+v %v", e, err)
	}
	_, err := slow.Next(ctxT(t))
	var lost *EventsLostError
	if !errors.As(err, &lost) || lost.Count != 96 {
		t.Fatalf("slow subscription: %v, want 96 lost", err)
	}
	for want := 96; want < 100; want++ {
		e, err := slow.Next(ctxT(t))
		if err != nil || e.String("n") != fmt.Sprint(want) {
			t.Fatalf("after loss: %+v %v, want n=%d", e, err, want)
		}
	}
}

func TestExecuteWaitAndWait(t *testing.T) {
	m, f := connected(t)
	go func() {
		req := f.recv()
		// The event may come before the reply: QEMU does that for some commands.
		f.event("DEVICE_DELETED", `{"device": "other"}`)
		f.event("DEVICE_DELETED", `{"device": "nic1", "path": "/machine/peripheral/nic1"}`)
		f.reply(req, "{}")
	}()
	if err := m.DeviceDel(ctxT(t), "nic1"); err != nil {
		t.Fatal(err)
	}

	sub := m.Subscribe()
	defer sub.Close()
	f.event("STOP", `{}`)
	f.event("SHUTDOWN", `{"guest": true, "reason": "guest-shutdown"}`)
	e, err := sub.Wait(ctxT(t), Match("SHUTDOWN", "guest", "true"))
	if err != nil || e.String("reason") != "guest-shutdown" {
		t.Fatalf("wait: %+v %v", e, err)
	}
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := sub.Wait(short, AnyOf("RESUME")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait for an event that never comes: %v", err)
	}
}

func TestRunRawAndRun(t *testing.T) {
	m, f := connected(t)
	f.serve(func(req fakeRequest) string {
		if req.Execute == "query-status" {
			return `{"status": "running", "running": true}`
		}
		return `{}`
	})
	out, err := m.RunRaw(ctxT(t), []byte(`{"execute": "query-status", "id": {"mine": 7}}`))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Return StatusInfo      `json:"return"`
		ID     json.RawMessage `json:"id"`
	}
	if err := json.Unmarshal(out, &r); err != nil || r.Return.Status != "running" || string(r.ID) != `{"mine":7}` {
		t.Fatalf("raw reply %s (%v)", out, err)
	}
	out, err = m.Run([]byte(`{"execute":"stop"}`))
	if err != nil || strings.Contains(string(out), `"id"`) {
		t.Fatalf("Run: %s %v", out, err)
	}
	for _, bad := range []string{`not json`, `{"arguments": {}}`, `[1,2]`} {
		if _, err := m.RunRaw(ctxT(t), []byte(bad)); err == nil {
			t.Errorf("RunRaw(%s): no error", bad)
		}
	}
}

func TestRunReturnsQMPErrors(t *testing.T) {
	m, f := connected(t)
	go func() {
		req := f.recv()
		f.send(`{"error": {"class": "GenericError", "desc": "boom"}, "id": ` + string(req.ID) + "}\n")
		req = f.recv()
		f.send(`{"error": {"class": "GenericError", "desc": "boom"}, "id": ` + string(req.ID) + "}\n")
	}()
	if _, err := m.Run([]byte(`{"execute":"cont"}`)); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("Run: %v", err)
	}
	out, err := m.RunRaw(ctxT(t), []byte(`{"execute":"cont"}`))
	if err != nil || !strings.Contains(string(out), `"GenericError"`) {
		t.Fatalf("RunRaw must return error replies as JSON: %s %v", out, err)
	}
}

func TestFilesPassedWithSCMRights(t *testing.T) {
	m, f := connected(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	got := make(chan fakeRequest, 1)
	go func() {
		req := f.recv()
		f.reply(req, "{}")
		got <- req
	}()
	if err := m.GetFD(ctxT(t), "tap0", w); err != nil {
		t.Fatal(err)
	}
	req := <-got
	var args struct {
		FDName string `json:"fdname"`
	}
	_ = json.Unmarshal(req.Arguments, &args)
	if req.Execute != "getfd" || args.FDName != "tap0" || len(req.files) != 1 {
		t.Fatalf("request %s %s with %d files", req.Execute, req.Arguments, len(req.files))
	}
	// The descriptor QEMU got is the pipe's write end.
	passed := req.files[0]
	defer passed.Close()
	if _, err := passed.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(r, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("read %q %v", buf, err)
	}
}

func TestMessageSizeLimit(t *testing.T) {
	m, f := connected(t, WithMaxMessageSize(1<<10))
	done := async(func() error { return m.Execute(ctxT(t), "query-qmp-schema", nil, nil) })
	req := f.recv()
	f.reply(req, `"`+strings.Repeat("y", 4<<10)+`"`)
	if err := waitErr(t, done); !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("err %v", err)
	}
}

func TestConcurrentCallsRaceClean(t *testing.T) {
	m, f := connected(t)
	f.serve(func(req fakeRequest) string {
		return fmt.Sprintf(`{"status": %s}`, req.ID) // echo the id as the status
	})
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for g := 0; g < 50; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 4; i++ {
				msg, err := m.k.call(ctxT(t), "query-status", nil, nil, nil)
				if err != nil {
					errs <- err
					return
				}
				var r StatusInfo
				if err := json.Unmarshal(msg.Return, &r); err != nil || r.Status != idString(msg.ID) {
					errs <- fmt.Errorf("reply %s for %s", msg.Return, msg.ID)
				}
			}
		}()
	}
	go func() {
		for i := 0; i < 50; i++ {
			f.event("TICK", `{}`)
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestDisconnectEndsCalls(t *testing.T) {
	m, f := connected(t)
	pend := async(func() error { return m.Execute(ctxT(t), "query-status", nil, nil) })
	f.recv()
	if err := m.Disconnect(); err != nil {
		t.Fatal(err)
	}
	if err := waitErr(t, pend); !errors.Is(err, ErrClosed) {
		t.Fatalf("pending after Disconnect: %v", err)
	}
	if _, err := m.Events(ctxT(t)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Events after Disconnect: %v", err)
	}
}

func TestQuitTreatsClosedAsSuccess(t *testing.T) {
	m, f := connected(t)
	go func() {
		f.recv()
		f.event("SHUTDOWN", `{"guest": false, "reason": "host-qmp-quit"}`)
		f.close() // QEMU may exit before its reply is read
	}()
	if err := m.Quit(ctxT(t)); err != nil {
		t.Fatalf("Quit: %v", err)
	}
}

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

func TestDialWaitsForTheSocket(t *testing.T) {
	path := t.TempDir() + "/late.sock"
	short, cancel := contextWithTimeout(100 * time.Millisecond)
	defer cancel()
	if _, err := Dial(short, path); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("no socket: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		m, err := Dial(ctxT(t), path)
		if err == nil {
			m.Close()
		}
		done <- err
	}()
	l, err := net.Listen("unix", path) // appears after Dial started
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte(greetingLine))
	line, _ := bufio.NewReader(c).ReadBytes('\n')
	var req fakeRequest
	_ = json.Unmarshal(line, &req)
	c.Write([]byte(`{"return": {}, "id": ` + string(req.ID) + "}\n"))
	if err := waitErr(t, done); err != nil {
		t.Fatal(err)
	}
}

func TestCanceledContextSendsNothing(t *testing.T) {
	m, f := connected(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := m.Execute(ctx, "stop", nil, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	// The next command is the first QEMU sees.
	done := async(func() error { return m.Execute(ctxT(t), "cont", nil, nil) })
	req := f.recv()
	if req.Execute != "cont" {
		t.Fatalf("QEMU got %q first", req.Execute)
	}
	f.reply(req, "{}")
	if err := waitErr(t, done); err != nil {
		t.Fatal(err)
	}
}

// SendKey sends qcodes in order, with hold-time only when asked.
func TestSendKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		hold time.Duration
		keys []string
		want string // the arguments QEMU gets
		err  string
	}{
		{name: "ctrl-alt-delete", keys: CtrlAltDelete,
			want: `{"keys":[{"type":"qcode","data":"ctrl"},{"type":"qcode","data":"alt"},{"type":"qcode","data":"delete"}]}`},
		{name: "held", hold: 250 * time.Millisecond, keys: []string{"a"},
			want: `{"keys":[{"type":"qcode","data":"a"}],"hold-time":250}`},
		{name: "no keys", err: "no keys"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, f := connected(t)
			done := async(func() error { return m.SendKey(ctxT(t), tc.hold, tc.keys...) })
			if tc.err != "" {
				if err := waitErr(t, done); err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			req := f.recv()
			if req.Execute != "send-key" || string(req.Arguments) != tc.want {
				t.Errorf("sent %s %s, want send-key %s", req.Execute, req.Arguments, tc.want)
			}
			f.reply(req, `{}`)
			if err := waitErr(t, done); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// SetLink sends set_link with the device and the state; QEMU's error for an
// unknown device comes back as a *Error.
func TestSetLink(t *testing.T) {
	for _, tc := range []struct {
		name, dev string
		up        bool
		reply     string // "" = {}
		want      string // the arguments QEMU gets
		err       string
	}{
		{name: "down", dev: "net0", want: `{"name":"net0","up":false}`},
		{name: "up", dev: "net0", up: true, want: `{"name":"net0","up":true}`},
		{name: "unknown device", dev: "nope", up: true, want: `{"name":"nope","up":true}`,
			reply: `{"class":"DeviceNotFound","desc":"Device 'nope' not found"}`, err: "not found"},
		{name: "no name", err: "no device name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, f := connected(t)
			done := async(func() error { return m.SetLink(ctxT(t), tc.dev, tc.up) })
			if tc.want == "" {
				if err := waitErr(t, done); err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			req := f.recv()
			if req.Execute != "set_link" || string(req.Arguments) != tc.want {
				t.Errorf("sent %s %s, want set_link %s", req.Execute, req.Arguments, tc.want)
			}
			if tc.reply != "" {
				f.send(`{"error": ` + tc.reply + `, "id": ` + string(req.ID) + "}\n")
			} else {
				f.reply(req, `{}`)
			}
			err := waitErr(t, done)
			var qe *Error
			switch {
			case tc.err == "" && err != nil:
				t.Fatal(err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || !errors.As(err, &qe)):
				t.Fatalf("err %v, want a *Error with %q", err, tc.err)
			}
		})
	}
}
