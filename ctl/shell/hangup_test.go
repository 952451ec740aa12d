package shell

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/kemu-dev/kemu/ctl/cli/clitest"
)

// TestShellEndsWithClient: a shell whose client goes away (its stdout
// without a reader, its terminal closed — what kemuctl shell VMI's exec
// shows of a killed client) ends within hangupGrace with HangupExit, and
// the launcher sees its running stream end.
func TestShellEndsWithClient(t *testing.T) {
	const limit = 10 * time.Second
	for _, tc := range []struct {
		name string
		tty  bool
		eof  bool // --eof-hangup; stdout drained throughout, stdin closed
	}{
		{"stdout reader gone during -c events", false, false},
		{"terminal closed during interactive events", true, false},
		// A container runtime keeps draining an exec's stdout after its
		// client went away and closes only stdin (kemuctl shell VMI holds
		// it open for -c commands that read no input).
		{"stdin ended during -c events --eof-hangup", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeLauncher{}
			sock := startFake(t, f)
			home := t.TempDir()
			args := []string{"shell", "--socket", sock}
			if !tc.tty {
				args = append(args, "-c", "events")
			}
			if tc.eof {
				args = append(args, "--"+EOFHangupFlag)
			}
			cmd := exec.Command(os.Args[0], args...)
			cmd.Env = append(os.Environ(), clitest.AsMainEnv+"=1", "TERM=xterm", "XDG_CACHE_HOME="+home, "HOME="+home)
			var hangUp func()
			if tc.tty {
				ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 160})
				if err != nil {
					t.Fatal(err)
				}
				// The master, non-blocking and read with deadlines, so
				// that the close below is not held back by a pending
				// read (a blocking one keeps the terminal open).
				fd, err := unix.Dup(int(ptmx.Fd()))
				ptmx.Close()
				if err != nil {
					t.Fatal(err)
				}
				if err := unix.SetNonblock(fd, true); err != nil {
					t.Fatal(err)
				}
				tty := os.NewFile(uintptr(fd), "ptmx")
				sc := &clitest.Screen{}
				stopRead, readDone := make(chan struct{}), make(chan struct{})
				go func() {
					defer close(readDone)
					buf := make([]byte, 4096)
					for {
						select {
						case <-stopRead:
							return
						default:
						}
						_ = tty.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
						n, err := tty.Read(buf)
						_, _ = sc.Write(buf[:n])
						if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
							return
						}
					}
				}()
				clitest.WaitFor(t, "the prompt", limit, sc, func(out string) bool { return strings.Contains(out, Prompt) })
				if _, err := tty.WriteString("events\r"); err != nil {
					t.Fatal(err)
				}
				hangUp = func() {
					close(stopRead)
					<-readDone
					_ = tty.Close()
				}
			} else if tc.eof {
				in, err := cmd.StdinPipe()
				if err != nil {
					t.Fatal(err)
				}
				cmd.Stdout = &clitest.Screen{} // drained, as the runtime does
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				hangUp = func() { _ = in.Close() }
			} else {
				r, w, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				cmd.Stdout = w
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				w.Close()
				hangUp = func() { _ = r.Close() }
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			t.Cleanup(func() { _ = cmd.Process.Kill() }) // an error once it exited

			watchers := func() (open, done int) {
				f.mu.Lock()
				defer f.mu.Unlock()
				return f.watchers, f.watchesDone
			}
			for deadline := time.Now().Add(limit); ; time.Sleep(20 * time.Millisecond) {
				if open, _ := watchers(); open == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("events opened no WatchDomain stream in %v", limit)
				}
			}
			t0 := time.Now()
			hangUp()
			select {
			case err := <-exited:
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != HangupExit {
					t.Errorf("the shell ended with %v, want exit status %d", err, HangupExit)
				}
				t.Logf("the shell ended %v after the hangup", time.Since(t0).Round(time.Millisecond))
			case <-time.After(limit):
				t.Fatalf("the shell still runs %v after its client went away", limit)
			}
			for deadline := time.Now().Add(limit); ; time.Sleep(20 * time.Millisecond) {
				if _, done := watchers(); done == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the launcher's WatchDomain stream did not end in %v", limit)
				}
			}
		})
	}
}

// Only console reads input among -c commands.
func TestReadsInput(t *testing.T) {
	for commands, want := range map[string]bool{
		"events":                            false,
		"status; stats":                     false,
		"console":                           true,
		"status; console":                   true,
		`qmp query-status {"a": "console"}`: false,
		"":                                  false,
	} {
		if got := ReadsInput(commands); got != want {
			t.Errorf("ReadsInput(%q) = %v, want %v", commands, got, want)
		}
	}
}
