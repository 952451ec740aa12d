package qmp

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"
)

// The guest agent has no greeting; a previous client may have left replies
// and junk in the pipe. Sync skips them; replies may or may not carry ids.
func TestAgentSyncSkipsStaleRepliesAndJunk(t *testing.T) {
	c, f := newFake(t)
	a := NewAgent(c)
	defer a.Close()

	go func() {
		req := f.recv()
		if req.Execute != "guest-sync-delimited" {
			t.Errorf("first command %q", req.Execute)
		}
		var args struct {
			ID int64 `json:"id"`
		}
		_ = json.Unmarshal(req.Arguments, &args)
		// Leftovers of an earlier client: a half line, an id-less reply, a
		// reply with someone else's id, then the delimited answer without id.
		f.send(`{"return": {"pid": 12`)
		f.send("\n")
		f.send(`{"return": {}}` + "\n")
		f.send(`{"return": 1234, "id": "other-client-1"}` + "\n")
		f.send("\xff" + `{"return": 99}` + "\n") // a stale sync answer for another token
		f.send(fmtReturn(args.ID, ""))
		// guest-ping, answered without an id (old qemu-ga)
		ping := f.recv()
		if ping.Execute != "guest-ping" {
			t.Errorf("second command %q", ping.Execute)
		}
		f.send(`{"return": {}}` + "\n")
		// guest-get-osinfo, answered with its id
		os := f.recv()
		f.send(`{"return": {"id": "kemu-testguest", "kernel-release": "6.1.0"}, "id": ` + string(os.ID) + "}\n")
	}()
	if err := a.Sync(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := a.Ping(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	info, err := a.OSInfo(ctxT(t))
	if err != nil || info.ID != "kemu-testguest" || info.KernelRelease != "6.1.0" {
		t.Fatalf("osinfo %+v %v", info, err)
	}
}

func fmtReturn(v int64, id string) string {
	b, _ := json.Marshal(v)
	s := "\xff" + `{"return": ` + string(b)
	if id != "" {
		s += `, "id": "` + id + `"`
	}
	return s + "}\n"
}

// A command that times out makes the next one resynchronise first.
func TestAgentResyncsAfterTimeout(t *testing.T) {
	c, f := newFake(t)
	a := NewAgent(c)
	defer a.Close()
	answerSync := func() {
		req := f.recv()
		if req.Execute != "guest-sync-delimited" {
			t.Errorf("expected a sync, got %q", req.Execute)
			return
		}
		var args struct {
			ID int64 `json:"id"`
		}
		_ = json.Unmarshal(req.Arguments, &args)
		f.send(fmtReturn(args.ID, ""))
	}
	go func() {
		answerSync()
		f.recv() // guest-info: no answer in time
		answerSync()
		req := f.recv()
		f.send(`{"return": {"version": "7.2.22", "supported_commands": [{"name": "guest-ping", "enabled": true}]}, "id": ` + string(req.ID) + "}\n")
	}()
	short, cancel := contextWithTimeout(100 * time.Millisecond)
	defer cancel()
	if _, err := a.Info(short); err == nil {
		t.Fatal("no timeout")
	}
	info, err := a.Info(ctxT(t))
	if err != nil || info.Version != "7.2.22" || len(info.SupportedCommands) != 1 {
		t.Fatalf("info %+v %v", info, err)
	}
}

func TestAgentExecDecodesOutput(t *testing.T) {
	c, f := newFake(t)
	a := NewAgent(c)
	defer a.Close()
	a.needSync = false
	go func() {
		req := f.recv()
		var args struct {
			Path    string   `json:"path"`
			Arg     []string `json:"arg"`
			Capture bool     `json:"capture-output"`
		}
		_ = json.Unmarshal(req.Arguments, &args)
		if req.Execute != "guest-exec" || args.Path != "/bin/echo" || len(args.Arg) != 1 || !args.Capture {
			t.Errorf("guest-exec request %s %s", req.Execute, req.Arguments)
		}
		f.send(`{"return": {"pid": 42}, "id": ` + string(req.ID) + "}\n")
		req = f.recv()
		f.send(`{"return": {"exited": true, "exitcode": 0, "out-data": "aGkK"}, "id": ` + string(req.ID) + "}\n")
	}()
	pid, err := a.Exec(ctxT(t), "/bin/echo", []string{"hi"}, nil, true)
	if err != nil || pid != 42 {
		t.Fatalf("exec %d %v", pid, err)
	}
	st, err := a.ExecStatus(ctxT(t), pid)
	if err != nil || !st.Exited || string(st.Stdout) != "hi\n" {
		t.Fatalf("status %+v %v", st, err)
	}
}

func TestAgentRunPollsUntilExited(t *testing.T) {
	c, f := newFake(t)
	a := NewAgent(c)
	defer a.Close()
	a.needSync = false
	go func() {
		req := f.recv()
		f.send(`{"return": {"pid": 7}, "id": ` + string(req.ID) + "}\n")
		for i := 0; i < 2; i++ { // still running twice
			req = f.recv()
			f.send(`{"return": {"exited": false}, "id": ` + string(req.ID) + "}\n")
		}
		req = f.recv()
		f.send(`{"return": {"exited": true, "exitcode": 3, "err-data": "b29wcw=="}, "id": ` + string(req.ID) + "}\n")
	}()
	st, err := a.Run(ctxT(t), "/bin/false", nil, nil)
	if err != nil || !st.Exited || st.ExitCode != 3 || string(st.Stderr) != "oops" {
		t.Fatalf("Run: %+v %v", st, err)
	}
}

func TestAgentClosedConnection(t *testing.T) {
	c, f := newFake(t)
	a := NewAgent(c)
	defer a.Close()
	f.close()
	if err := a.Ping(ctxT(t)); !errors.Is(err, ErrClosed) {
		t.Fatalf("ping on a closed agent: %v", err)
	}
}

// junkReader yields n bytes of 'x' and never a newline (n < 0: forever).
type junkReader struct{ n int }

func (j *junkReader) Read(p []byte) (int, error) {
	if j.n == 0 {
		return 0, io.EOF
	}
	if j.n > 0 && len(p) > j.n {
		p = p[:j.n]
	}
	for i := range p {
		p[i] = 'x'
	}
	if j.n > 0 {
		j.n -= len(p)
	}
	return len(p), nil
}

// countingReader counts the bytes taken from r.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// readMessage takes a line up to the limit (newline included) and refuses
// a longer one after reading at most the limit, whatever follows: memory
// does not grow with the junk.
func TestReadMessageBounded(t *testing.T) {
	const max = 64 << 10
	const bufSize = 4 << 10
	for _, tc := range []struct {
		name    string
		in      func() io.Reader
		wantLen int  // of the line returned
		tooLong bool // ErrLineTooLong
	}{
		{name: "short line", in: func() io.Reader { return strings.NewReader("{}\n") }, wantLen: 3},
		{name: "exactly the limit", in: func() io.Reader { return strings.NewReader(strings.Repeat("x", max-1) + "\n") }, wantLen: max},
		{name: "one byte over", in: func() io.Reader { return strings.NewReader(strings.Repeat("x", max) + "\n") }, tooLong: true},
		{name: "many times over, newline far away", in: func() io.Reader {
			return io.MultiReader(&junkReader{n: 200 * max}, strings.NewReader("\n"))
		}, tooLong: true},
		{name: "endless junk", in: func() io.Reader { return &junkReader{n: -1} }, tooLong: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// What was read is exact: the limit and at most one more buffer.
			in := &countingReader{r: tc.in()}
			line, err := readMessage(bufio.NewReaderSize(in, bufSize), max)
			if tc.tooLong {
				if !errors.Is(err, ErrLineTooLong) || line != nil {
					t.Fatalf("got %d bytes, %v; want ErrLineTooLong", len(line), err)
				}
			} else if err != nil || len(line) != tc.wantLen {
				t.Fatalf("got %d bytes, %v; want %d", len(line), err, tc.wantLen)
			}
			if in.n > max+bufSize {
				t.Errorf("read %d bytes for a %d-byte limit", in.n, max)
			}
			// Allocation is measured process-wide, so another goroutine
			// (a fake from an earlier test winding down, the race
			// detector) can add to one run; the least of a few runs is
			// readMessage's own: its buffer and at most ~2x the limit.
			least := ^uint64(0)
			for range 5 {
				var before, after runtime.MemStats
				r := bufio.NewReaderSize(tc.in(), bufSize)
				runtime.ReadMemStats(&before)
				_, _ = readMessage(r, max)
				runtime.ReadMemStats(&after)
				least = min(least, after.TotalAlloc-before.TotalAlloc)
			}
			if least > 3*max {
				t.Errorf("allocated %d bytes for a %d-byte limit", least, max)
			}
		})
	}
}

// A guest that floods the agent channel with one endless line: the pending
// command fails with ErrClosed caused by ErrLineTooLong, the line is
// counted, and the connection is gone (a new Agent must be dialled). A line
// just under the limit still works.
func TestAgentOversizeLineResetsAndCounts(t *testing.T) {
	c, f := newFake(t)
	a := NewAgent(c)
	defer a.Close()
	a.needSync = false
	before := AgentLinesDropped()
	go func() {
		req := f.recv()
		// A reply just under the limit, then endless junk.
		pad := MaxAgentLineSize - len(`{"return": {"pad": ""}, "id": }`) - len(req.ID) - 1
		f.send(`{"return": {"pad": "` + strings.Repeat("p", pad) + `"}, "id": ` + string(req.ID) + "}\n")
		f.recv()
		chunk := strings.Repeat("x", 256<<10)
		for range 4 * MaxAgentLineSize / len(chunk) {
			if _, err := f.c.Write([]byte(chunk)); err != nil {
				return // the client reset the connection
			}
		}
	}()
	var big struct {
		Pad string `json:"pad"`
	}
	if err := a.Execute(ctxT(t), "guest-info", nil, &big); err != nil || len(big.Pad) == 0 {
		t.Fatalf("a reply under the limit: %d bytes, %v", len(big.Pad), err)
	}
	err := a.Ping(ctxT(t))
	if !errors.Is(err, ErrClosed) || !errors.Is(err, ErrLineTooLong) {
		t.Fatalf("ping during a flood: %v, want ErrClosed and ErrLineTooLong", err)
	}
	if got := AgentLinesDropped() - before; got != 1 {
		t.Errorf("AgentLinesDropped grew by %d, want 1", got)
	}
	select {
	case <-a.Done():
	default:
		t.Error("the connection is still up after an oversize line")
	}
}

// guest-shutdown answers only when it fails: Shutdown synchronises, sends
// it, and takes the following sync's answer (or the guest going away before
// answering) as accepted, an error reply as refused.
func TestAgentShutdown(t *testing.T) {
	syncAnswer := func(f *fakeQEMU, req fakeRequest) {
		t.Helper()
		if req.Execute != "guest-sync-delimited" {
			t.Errorf("expected a sync, got %q", req.Execute)
			return
		}
		var args struct {
			ID int64 `json:"id"`
		}
		_ = json.Unmarshal(req.Arguments, &args)
		f.send(fmtReturn(args.ID, ""))
	}
	for _, tt := range []struct {
		name string
		mode ShutdownMode
		// guest plays the agent after the first sync and guest-shutdown.
		guest   func(f *fakeQEMU, shutdown fakeRequest)
		wantErr string
	}{
		{"accepted", ShutdownReboot, func(f *fakeQEMU, _ fakeRequest) { syncAnswer(f, f.recv()) }, ""},
		{"refused", ShutdownPowerdown, func(f *fakeQEMU, sd fakeRequest) {
			f.send(`{"error": {"class": "GenericError", "desc": "Command guest-shutdown has been disabled"}, "id": ` + string(sd.ID) + "}\n")
			syncAnswer(f, f.recv())
		}, "has been disabled"},
		{"the guest went down before answering", ShutdownReboot, func(f *fakeQEMU, _ fakeRequest) {
			f.recv() // the sync, never answered
			f.close()
		}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, f := newFake(t)
			a := NewAgent(c)
			defer a.Close()
			go func() {
				syncAnswer(f, f.recv())
				sd := f.recv()
				var args struct {
					Mode string `json:"mode"`
				}
				_ = json.Unmarshal(sd.Arguments, &args)
				if sd.Execute != "guest-shutdown" || args.Mode != string(tt.mode) || len(sd.ID) == 0 {
					t.Errorf("request %s %s id %s, want guest-shutdown mode %s with an id", sd.Execute, sd.Arguments, sd.ID, tt.mode)
				}
				tt.guest(f, sd)
			}()
			err := a.Shutdown(ctxT(t), tt.mode)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Shutdown: %v", err)
			case tt.wantErr != "":
				var qe *Error
				if !errors.As(err, &qe) || qe.Command != "guest-shutdown" || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Shutdown: %v, want a guest-shutdown error with %q", err, tt.wantErr)
				}
			}
		})
	}
}
