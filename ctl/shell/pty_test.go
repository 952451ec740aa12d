package shell

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/kemu-dev/kemu/ctl/cli/clitest"
)

func TestMain(m *testing.M) { clitest.Main(m, newRoot) }

// TestShellInteractive drives the interactive shell through a
// pseudo-terminal: completion of its commands and of QEMU's, history,
// qmp, pause, events ended by Ctrl-C, exit.
func TestShellInteractive(t *testing.T) {
	f := &fakeLauncher{}
	sock := startFake(t, f)
	cache := t.TempDir()

	cmd := exec.Command(os.Args[0], "shell", "--socket", sock)
	cmd.Env = append(os.Environ(), clitest.AsMainEnv+"=1", "TERM=xterm", "XDG_CACHE_HOME="+cache, "HOME="+cache)
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 160})
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() { _ = cmd.Process.Kill() }() // an error once it exited
	sc := &clitest.Screen{}
	go func() { _, _ = clitest.CopyAll(sc, tty) }()
	typeIn := func(s string) {
		t.Helper()
		if _, err := tty.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	const limit = 20 * time.Second
	count := func(s string) func(string) int {
		return func(out string) int { return strings.Count(out, s) }
	}
	states := count("state:")

	clitest.WaitFor(t, "the prompt", limit, sc, func(out string) bool {
		return strings.Contains(out, "connected to launcher fake (API v1)") && strings.Contains(out, Prompt)
	})

	// sta<TAB> completes to status.
	mark := len(sc.String())
	typeIn("sta\t")
	clitest.WaitFor(t, "sta<TAB> to complete to status", limit, sc, func(out string) bool {
		return strings.Contains(out[mark:], "status")
	})
	typeIn("\r")
	clitest.WaitFor(t, "the status", limit, sc, func(out string) bool { return states(out) == 1 && strings.Contains(out, "Running (Booted)") })
	if f.called("GetDomain") != 1 {
		t.Fatalf("GetDomain called %d times", f.called("GetDomain"))
	}

	// Up recalls it.
	typeIn("\x1b[A")
	typeIn("\r")
	clitest.WaitFor(t, "the status recalled from the history", limit, sc, func(out string) bool { return states(out) == 2 })

	// qmp query-st<TAB> completes from QEMU's query-commands.
	mark = len(sc.String())
	typeIn("qmp query-st\t")
	clitest.WaitFor(t, "qmp query-st<TAB> to complete to query-status", limit, sc, func(out string) bool {
		return strings.Contains(out[mark:], "query-status")
	})
	typeIn("\r")
	clitest.WaitFor(t, "the QMP reply", limit, sc, func(out string) bool { return strings.Contains(out[mark:], `"status": "running"`) })
	if f.called(`qmp {"execute":"query-status"}`) != 1 || f.called(`qmp {"execute":"query-commands"}`) != 1 {
		t.Fatalf("the launcher got %q", f.calls)
	}

	mark = len(sc.String())
	typeIn("pause\r")
	clitest.WaitFor(t, "pause", limit, sc, func(out string) bool { return strings.Contains(out[mark:], "paused") })

	// events follows until Ctrl-C, which ends it and not the shell.
	mark = len(sc.String())
	typeIn("events\r")
	clitest.WaitFor(t, "the events", limit, sc, func(out string) bool {
		return strings.Contains(out[mark:], "domain Paused (User)") && strings.Contains(out[mark:], "qmp STOP") &&
			strings.Contains(out[mark:], `qmp RTC_CHANGE {"offset":1}`)
	})
	typeIn("\x03")
	clitest.WaitFor(t, "Ctrl-C to end the event stream", limit, sc, func(string) bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.watchesDone == 1
	})
	mark = len(sc.String())
	typeIn("status\r")
	clitest.WaitFor(t, "the prompt back after events", limit, sc, func(out string) bool { return strings.Contains(out[mark:], "Paused (User)") })

	// A failing command prints the gRPC error and the shell goes on.
	mark = len(sc.String())
	typeIn("pause\r")
	clitest.WaitFor(t, "the error", limit, sc, func(out string) bool {
		return strings.Contains(out[mark:], "error: FailedPrecondition: the domain is Paused, not Running")
	})

	typeIn("exit\r")
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("kemuctl shell: %v\n%q", err, sc.String())
		}
	case <-time.After(limit):
		t.Fatalf("exit did not end the shell:\n%q", sc.String())
	}
	history, err := os.ReadFile(filepath.Join(cache, "kemu", "shell_history"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(history), "qmp query-status") || !strings.Contains(string(history), "events") {
		t.Errorf("history file:\n%s", history)
	}
}
