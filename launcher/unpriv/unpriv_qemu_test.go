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

// TestStartUserNS: a Spec.UserNS program is root of its own user namespace
// (uid 0, every capability, bounding set included — inside), and to the
// node uid and gid 107 in every slot, no supplementary group,
// no_new_privs: /proc/<pid>/status and uid_map read from here (the node's
// namespace) translate its ids to ours. Its capabilities are the
// namespace's: they say nothing of what it may do to the node.
func TestStartUserNS(t *testing.T) {
	requireRoot(t)
	id := Identity{UID: UID, GID: GID}
	spec := Spec{Identity: id, Umask: 0o077, UserNS: true}

	// Inside: what the program sees of itself.
	cmd := exec.Command("sh", "-c", "cat /proc/self/status /proc/self/uid_map /proc/self/gid_map /proc/self/setgroups")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := run(t, cmd, spec)
	if err != nil {
		t.Fatal(err)
	}
	in := parse(t, out)
	if in.UIDs != [4]int{0, 0, 0, 0} || in.GIDs != [4]int{0, 0, 0, 0} {
		t.Errorf("inside its namespace: uids %v gids %v, want root\n%s", in.UIDs, in.GIDs, out)
	}
	if !in.NoNewPrivs {
		t.Errorf("no_new_privs not set\n%s", out)
	}
	if g := groupsLine(out); g != "" {
		t.Errorf("inside: supplementary groups %q", g)
	}
	for _, want := range []string{"0        107          1", "deny"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("want %q in\n%s", want, out)
		}
	}

	// Outside: the node's view of the running program.
	cmd = exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	exited, err := Start(cmd, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		<-exited
	}()
	pid := cmd.Process.Pid
	s, err := ReadStatus(pid)
	if err != nil {
		t.Fatal(err)
	}
	if s.UIDs != [4]int{UID, UID, UID, UID} || s.GIDs != [4]int{GID, GID, GID, GID} || !s.NoNewPrivs {
		t.Errorf("node view: uids %v gids %v no_new_privs %v, want %d, %d, true", s.UIDs, s.GIDs, s.NoNewPrivs, UID, GID)
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	if g := groupsLine(raw); g != "" {
		t.Errorf("node view: supplementary groups %q", g)
	}
	for file, want := range map[string]string{"uid_map": fmt.Sprint(UID), "gid_map": fmt.Sprint(GID)} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
		if err != nil {
			t.Fatal(err)
		}
		if f := strings.Fields(string(b)); len(f) != 3 || f[0] != "0" || f[1] != want || f[2] != "1" {
			t.Errorf("%s = %q, want 0 %s 1", file, b, want)
		}
	}
	var st unix.Stat_t
	if err := unix.Stat(fmt.Sprintf("/proc/%d", pid), &st); err != nil || st.Uid != UID {
		t.Errorf("/proc/%d is owned by %d (%v), want %d", pid, st.Uid, err, UID)
	}
	// The namespace is its own, not ours.
	mine, _ := os.Readlink("/proc/self/ns/user")
	its, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/user", pid))
	if err != nil || its == mine {
		t.Errorf("user namespace %q (%v), ours %q", its, err, mine)
	}
}

func TestStartUserNSErrors(t *testing.T) {
	requireRoot(t)
	if _, err := Start(exec.Command("true"), Spec{Identity: Identity{UID: UID, GID: GID, Groups: []int{110}}, UserNS: true}); err == nil {
		t.Error("supplementary groups in a user namespace were accepted")
	}
	cmd := exec.Command("true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}
	if _, err := Start(cmd, Spec{Identity: Identity{UID: UID, GID: GID}}); err == nil {
		t.Error("a command with its own user namespace was accepted")
	}
}

// groupsLine is the Groups line's value of a status dump.
func groupsLine(status []byte) string {
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "Groups:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "(no Groups line)"
}
