//go:build qemu

package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kemu-dev/kemu/launcher/signals"
	"github.com/kemu-dev/kemu/launcher/unpriv"
	"github.com/kemu-dev/kemu/test/testguest"
)

// kemuctlRun starts `kemuctl run` on the example VMI and returns it once the
// domain is Running, with QEMU's pid and the runtime directory.
func kemuctlRun(t *testing.T, extra ...string) (*exec.Cmd, *bufio.Scanner, int, string) {
	t.Helper()
	root, err := testguest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "kemuctl")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	dir := testguest.TempDir(t, "kemu-run-") // QEMU (uid 107) must traverse it
	run := filepath.Join(dir, "run")
	args := append([]string{"run", "--accel", "tcg", "--dir", run, "--image-cache", filepath.Join(dir, "cache")}, extra...)
	cmd := exec.Command(bin, append(args, "examples/standalone/vmi-testguest.yaml")...)
	cmd.Dir = root
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	sc := bufio.NewScanner(out)
	pid := 0
	for sc.Scan() {
		line := sc.Text()
		t.Log(line)
		if i := strings.Index(line, "QEMU pid "); i >= 0 {
			fmt.Sscanf(line[i:], "QEMU pid %d", &pid)
		}
		if strings.Contains(line, "domain: Running") {
			return cmd, sc, pid, run
		}
	}
	t.Fatal("kemuctl run ended before the domain was Running")
	return nil, nil, 0, ""
}

// exitOf waits for the command within limit and returns its exit status,
// logging the rest of its output.
func exitOf(t *testing.T, cmd *exec.Cmd, sc *bufio.Scanner, limit time.Duration) int {
	t.Helper()
	done := make(chan struct{})
	go func() {
		for sc.Scan() {
			t.Log(sc.Text())
		}
		close(done)
	}()
	timer := time.AfterFunc(limit, func() { _ = cmd.Process.Kill() })
	defer timer.Stop()
	<-done
	err := cmd.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	t.Fatal(err)
	return -1
}

func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && i+2 < len(b) && b[i+2] == 'Z'
}

// SIGTERM is a graceful shutdown: the ACPI button is pressed (again every
// 5 s, so a guest still booting gets it too), the guest powers off, kemuctl
// exits 0 and leaves nothing behind.
func TestRunSIGTERMShutsDownGracefully(t *testing.T) {
	cmd, sc, pid, dir := kemuctlRun(t)
	// kemuctl run as root: QEMU all the same as 107:107 with nothing.
	st, err := unpriv.ReadStatus(pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Unprivileged(unpriv.Identity{UID: unpriv.UID, GID: unpriv.GID}); err != nil || st.CapEff != 0 || st.CapBnd != 0 {
		t.Errorf("QEMU of kemuctl run: %v (CapEff %x CapBnd %x)", err, st.CapEff, st.CapBnd)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(t, cmd, sc, 120*time.Second); code != signals.ExitPoweredOff {
		t.Fatalf("exit status %d, want %d (guest powered off)", code, signals.ExitPoweredOff)
	}
	if !gone(pid) {
		t.Errorf("QEMU %d still running", pid)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("runtime dir left behind: %v", err)
	}
}

// A second SIGTERM stops QEMU at once, and still cleans up every file.
func TestRunSecondSIGTERMStopsButCleansUp(t *testing.T) {
	cmd, sc, pid, dir := kemuctlRun(t)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The first signal must be seen before the second (kemuctl prints it).
	for sc.Scan() {
		t.Log(sc.Text())
		if strings.Contains(sc.Text(), "interrupted") {
			break
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(t, cmd, sc, 60*time.Second); code != signals.ExitStopped {
		t.Fatalf("exit status %d, want %d", code, signals.ExitStopped)
	}
	if !gone(pid) {
		t.Errorf("QEMU %d still running", pid)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("runtime dir left behind: %v", err)
	}
}
