package launcher

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"time"

	"github.com/kemu-dev/kemu/qmp"
)

// MaxExecOutput bounds what Exec passes on of each of a command's output
// streams; the rest is dropped and the result says so.
const MaxExecOutput = 16 << 20

// ExecDir is the guest directory where Exec's output files are created
// (and unlinked as soon as the command has them open).
const ExecDir = "/tmp"

// execWrapper runs "$3" with its stdout and stderr appended to the files
// "$1" and "$2" (created by the launcher, which holds them open to read),
// stdin from /dev/null, and unlinks the files once they are open: nothing
// stays behind in the guest, whatever happens to the launcher.
const execWrapper = `exec 3>>"$1" 4>>"$2" </dev/null || exit 127
rm -f -- "$1" "$2" 2>/dev/null
exec /bin/sh -c "$3" >&3 2>&4 3>&- 4>&-`

// ExecResult is how a command run by Exec ended.
type ExecResult struct {
	// ExitCode is the command's exit status (when Signal is 0).
	ExitCode int
	// Signal is the signal that killed it, or 0.
	Signal int
	// StdoutTruncated and StderrTruncated say that a stream passed
	// MaxExecOutput and the rest of it was dropped.
	StdoutTruncated, StderrTruncated bool
}

// OK says the command exited with status 0.
func (r ExecResult) OK() bool { return r.Signal == 0 && r.ExitCode == 0 }

func (r ExecResult) String() string {
	if r.Signal != 0 {
		return fmt.Sprintf("killed by signal %d", r.Signal)
	}
	return fmt.Sprintf("exit status %d", r.ExitCode)
}

// Exec runs command with /bin/sh -c in the guest through the guest agent
// and copies its stdout and stderr to stdout and stderr as they arrive,
// polling until it exits or ctx ends (the command then goes on in the
// guest: the agent cannot kill it). qemu-ga's capture-output hands the
// output over only once the command exited, in one reply that may be far
// over qmp.MaxAgentLineSize, so the command writes to two files in
// ExecDir instead, read in qmp.MaxFileChunk chunks while it runs.
func (l *Launcher) Exec(ctx context.Context, command string, stdout, stderr io.Writer) (ExecResult, error) {
	var res ExecResult
	a, err := l.Agent(ctx)
	if err != nil {
		return res, err
	}
	var tok [8]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return res, err
	}
	base := ExecDir + "/kemu-exec-" + hex.EncodeToString(tok[:])
	streams := []*execStream{{path: base + ".out", w: stdout}, {path: base + ".err", w: stderr}}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), agentShutdownTimeout)
		defer cancel()
		for _, s := range streams {
			if s.opened {
				_ = a.FileClose(cctx, s.handle)
			}
		}
	}()
	for _, s := range streams {
		if s.handle, err = a.FileOpen(ctx, s.path, qmp.FileReadWrite); err != nil {
			return res, fmt.Errorf("launcher: exec: creating %s in the guest: %w", s.path, err)
		}
		s.opened = true
	}
	pid, err := a.Exec(ctx, "/bin/sh", []string{"-c", execWrapper, "kemu-exec", streams[0].path, streams[1].path, command}, nil, false)
	if err != nil {
		return res, fmt.Errorf("launcher: exec: %w", err)
	}
	// The caller's context ending while the command runs, whichever
	// agent call it interrupts, means the command outlived it.
	stillRunning := func() error {
		return fmt.Errorf("launcher: exec: pid %d still running in the guest: %w", pid, ctx.Err())
	}
	wait := 10 * time.Millisecond
	for {
		st, err := a.ExecStatus(ctx, pid)
		if err != nil {
			if ctx.Err() != nil {
				return res, stillRunning()
			}
			return res, fmt.Errorf("launcher: exec: status of pid %d: %w", pid, err)
		}
		moved := false
		for _, s := range streams {
			n, err := s.drain(ctx, a)
			if err != nil {
				if ctx.Err() != nil && !st.Exited {
					return res, stillRunning()
				}
				return res, fmt.Errorf("launcher: exec: reading %s in the guest: %w", s.path, err)
			}
			moved = moved || n > 0
		}
		if st.Exited { // everything it wrote is in the files: drained above
			res.ExitCode, res.Signal = st.ExitCode, st.Signal
			res.StdoutTruncated, res.StderrTruncated = streams[0].truncated, streams[1].truncated
			return res, nil
		}
		if moved {
			wait = 10 * time.Millisecond
		} else {
			wait = min(2*wait, 200*time.Millisecond)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return res, stillRunning()
		case <-t.C:
		}
	}
}

// execStream is one of a command's output files, read from the guest.
type execStream struct {
	path      string
	w         io.Writer
	handle    int64
	opened    bool
	total     int
	truncated bool
}

// drain copies what the file has now to w, up to MaxExecOutput in all.
func (s *execStream) drain(ctx context.Context, a *qmp.Agent) (int, error) {
	moved := 0
	for !s.truncated {
		// One byte over the bound tells a stream that reached it from one
		// that passed it.
		data, eof, err := a.FileRead(ctx, s.handle, min(qmp.MaxFileChunk, MaxExecOutput-s.total+1))
		if err != nil {
			return moved, err
		}
		if s.total+len(data) > MaxExecOutput {
			data = data[:MaxExecOutput-s.total]
			s.truncated = true
		}
		s.total += len(data)
		moved += len(data)
		if _, err := s.w.Write(data); err != nil {
			return moved, err
		}
		if eof {
			// The stream's end-of-file flag is sticky: clear it, the
			// command may write more.
			_, err := a.FileSeek(ctx, s.handle, 0, "cur")
			return moved, err
		}
		if len(data) == 0 {
			break
		}
	}
	return moved, nil
}
