//go:build qemu

package unpriv

import (
	"fmt"
	"runtime"
	"sync"
	"syscall"

	"bytes"
	"golang.org/x/sys/unix"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("needs root (make test runs as root)")
	}
}

// parse reads a status dump the way ReadStatus reads /proc.
func parse(t *testing.T, out []byte) Status {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "status")
	if err != nil {
		t.Fatal(err)
	}
	f.Write(out)
	f.Close()
	s, err := ReadStatusFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// run starts cmd with Start and waits for it.
func run(t *testing.T, cmd *exec.Cmd, spec Spec) ([]byte, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	exited, err := Start(cmd, spec)
	if err != nil {
		return nil, err
	}
	if err := <-exited; err != nil {
		return nil, fmt.Errorf("%w: %s", err, stderr.String())
	}
	return stdout.Bytes(), nil
}

func TestStartRunsUnprivileged(t *testing.T) {
	requireRoot(t)
	before, err := ReadStatus(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	beforeUmask := syscall.Umask(0o022)
	syscall.Umask(beforeUmask)
	for _, tc := range []struct {
		name   string
		groups []int
	}{
		{"no groups", nil},
		{"device group", []int{110}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := Identity{UID: UID, GID: GID, Groups: tc.groups}
			cmd := exec.Command("sh", "-c", "cat /proc/self/status; umask")
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			out, err := run(t, cmd, Spec{Identity: id, Umask: 0o027})
			if err != nil {
				t.Fatal(err)
			}
			s := parse(t, out)
			if err := s.Unprivileged(id); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if s.CapBnd != 0 {
				t.Errorf("CapBnd = %x, want 0", s.CapBnd)
			}
			wantGroups := "Groups:\t" + strconv.Itoa(GID)
			if len(tc.groups) > 0 {
				wantGroups = "Groups:\t" + strconv.Itoa(tc.groups[0])
			}
			if !strings.Contains(string(out), wantGroups) {
				t.Errorf("want %q in\n%s", wantGroups, out)
			}
			if !strings.Contains(string(out), "\n0027\n") {
				t.Errorf("umask not 0027:\n%s", out)
			}
		})
	}
	// The caller's process kept everything: the thread that forked was
	// Start's own, never the main thread (whose status is the process's),
	// though the runtime often schedules Start's goroutine there first.
	for range 20 {
		if _, err := run(t, exec.Command("true"), Spec{Identity: Identity{UID: UID, GID: GID}, Umask: 0o077}); err != nil {
			t.Fatal(err)
		}
	}
	after, err := ReadStatus(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("the test process changed: %+v, was %+v", after, before)
	}
	if u := syscall.Umask(0o022); u != beforeUmask {
		t.Errorf("the test process's umask is %04o, was %04o", u, beforeUmask)
	} else {
		syscall.Umask(u)
	}
	// Nor does any thread the runtime starts later inherit the prepared
	// thread's state: start more threads and read each one.
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			s, err := ReadStatusFile(fmt.Sprintf("/proc/self/task/%d/status", unix.Gettid()))
			if err != nil {
				t.Error(err)
				return
			}
			if s.NoNewPrivs || s.CapBnd != before.CapBnd {
				t.Errorf("thread %d: no_new_privs %v, bounding %x", unix.Gettid(), s.NoNewPrivs, s.CapBnd)
			}
		}()
	}
	wg.Wait()
}

func TestStartErrors(t *testing.T) {
	requireRoot(t)
	if _, err := Start(exec.Command("no-such-qemu"), Spec{Identity: Identity{UID: UID, GID: GID}}); err == nil {
		t.Fatal("a missing program was accepted")
	}
	cmd := exec.Command("true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{}}
	if _, err := Start(cmd, Spec{Identity: Identity{UID: UID, GID: GID}}); err == nil {
		t.Fatal("a command with its own Credential was accepted")
	}
}

// TestStartKeepsOtherChildren: children that other goroutines started with
// Pdeathsig from the runtime's threads outlive every program Start ran —
// the thread Start prepared is parked, not ended (ending it would kill
// whatever was forked from it before it was locked).
func TestStartKeepsOtherChildren(t *testing.T) {
	requireRoot(t)
	var others []*exec.Cmd
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command("sleep", "60")
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			if err := cmd.Start(); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			others = append(others, cmd)
			mu.Unlock()
		}()
	}
	wg.Wait()
	defer func() {
		for _, c := range others {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}()
	for range 32 {
		if _, err := run(t, exec.Command("true"), Spec{Identity: Identity{UID: UID, GID: GID}}); err != nil {
			t.Fatal(err)
		}
	}
	// Not reaped yet, a killed child is a zombie.
	for _, c := range others {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.Process.Pid))
		if f := strings.Fields(string(b)); err != nil || len(f) < 3 || f[2] == "Z" {
			t.Errorf("child %d was killed after Start's programs ended: %s %v", c.Process.Pid, b, err)
		}
	}
}
