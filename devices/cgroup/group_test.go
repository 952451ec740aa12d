package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The test binary doubles as the confined process: with KEMU_CGROUP_HELPER=open
// it opens each argument "path:r|w|rw" and prints "path ok" or "path <error>".
func TestMain(m *testing.M) {
	if os.Getenv("KEMU_CGROUP_HELPER") == "mount-own" {
		os.Exit(mountOwnHelper(os.Args[1]))
	}
	if os.Getenv("KEMU_CGROUP_HELPER") == "open" {
		for _, arg := range os.Args[1:] {
			p, mode, _ := strings.Cut(arg, ":")
			flag := map[string]int{"r": unix.O_RDONLY, "w": unix.O_WRONLY, "rw": unix.O_RDWR}[mode]
			fd, err := unix.Open(p, flag|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
			if err != nil {
				fmt.Printf("%s %v\n", arg, err)
				continue
			}
			unix.Close(fd)
			fmt.Printf("%s ok\n", arg)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root to make cgroups (make test runs as root)")
	}
	if _, err := Self(); err != nil {
		t.Fatalf("kemu needs a cgroup2 hierarchy: %v", err)
	}
}

// inGroup starts the helper directly into g (CLONE_INTO_CGROUP) and returns
// its verdict for each "path:mode".
func inGroup(t *testing.T, g *Group, args ...string) map[string]string {
	t.Helper()
	fd, err := g.FD()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "KEMU_CGROUP_HELPER=open")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("helper: %v: %s", err, errb.String())
	}
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		k, v, _ := strings.Cut(l, " ")
		got[k] = v
	}
	return got
}

const eperm = "operation not permitted"

func expect(t *testing.T, got map[string]string, want map[string]string) {
	t.Helper()
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: got %q, want %q", k, got[k], w)
		}
	}
}

// devices makes a /dev/mem-like node (c 1:1) and a loop device on a small file.
func devices(t *testing.T) (mem, loop string) {
	t.Helper()
	dir := t.TempDir()
	mem = filepath.Join(dir, "mem")
	if err := unix.Mknod(mem, unix.S_IFCHR|0o600, int(unix.Mkdev(1, 1))); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(img, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "-f", "--show", img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup: %v: %s", err, out)
	}
	loop = strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", loop).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v: %s", loop, err, out)
		}
	})
	return mem, loop
}

var groups atomic.Int32

func create(t *testing.T, allow Allowlist) *Group {
	t.Helper()
	g, err := Create("", fmt.Sprintf("kemu-test-%d-%d", os.Getpid(), groups.Add(1)), allow)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Remove(); err != nil {
			t.Error(err)
		}
	})
	return g
}

// parentUnaffected checks that the test process itself can still open everything.
func parentUnaffected(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		fd, err := unix.Open(p, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		switch {
		case err == nil:
			unix.Close(fd)
		case errors.Is(err, unix.ENXIO):
			// Passed the device cgroup check; the kernel has no driver for it
			// (this kernel has no /dev/mem).
		default:
			t.Errorf("parent cannot open %s: %v", p, err)
		}
	}
}

func TestAllowlistEnforced(t *testing.T) {
	needRoot(t)
	mem, loop := devices(t)
	allow, err := Default(false, false, false)
	if err != nil {
		t.Fatal(err)
	}
	g := create(t, allow)
	got := inGroup(t, g, "/dev/null:rw", "/dev/zero:r", "/dev/urandom:r", mem+":r", loop+":r", loop+":rw", "/dev/kvm:rw")
	expect(t, got, map[string]string{
		"/dev/null:rw": "ok", "/dev/zero:r": "ok", "/dev/urandom:r": "ok",
		mem + ":r": eperm, loop + ":r": eperm, loop + ":rw": eperm,
	})
	if _, err := os.Stat("/dev/kvm"); err == nil {
		expect(t, got, map[string]string{"/dev/kvm:rw": eperm})
	}
	parentUnaffected(t, "/dev/null", mem, loop)

	// The same with a shell, the way QEMU would meet it.
	fd, _ := g.FD()
	cmd := exec.Command("sh", "-c", "cat /dev/null && head -c1 /dev/zero >/dev/null && echo fine; cat "+mem)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "fine") || !strings.Contains(string(out), "Operation not permitted") {
		t.Fatalf("sh in the group: %v: %s", err, out)
	}

	// The block device of a block-mode volume, via Default.
	allow, err = Default(false, false, false, loop)
	if err != nil {
		t.Fatal(err)
	}
	g2 := create(t, allow)
	expect(t, inGroup(t, g2, loop+":rw", mem+":r", "/dev/null:rw"), map[string]string{
		loop + ":rw": "ok", mem + ":r": eperm, "/dev/null:rw": "ok",
	})
}

func TestUpdateGivesIntendedSet(t *testing.T) {
	needRoot(t)
	mem, loop := devices(t)
	base, err := Default(false, false, false)
	if err != nil {
		t.Fatal(err)
	}
	g := create(t, base)
	expect(t, inGroup(t, g, loop+":rw", "/dev/null:rw"), map[string]string{loop + ":rw": eperm, "/dev/null:rw": "ok"})

	// Hotplug: add the loop device. With stacked programs this would stay denied.
	withLoop, err := Default(false, false, false, loop)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Update(withLoop); err != nil {
		t.Fatal(err)
	}
	expect(t, inGroup(t, g, loop+":rw", "/dev/null:rw", mem+":r"), map[string]string{loop + ":rw": "ok", "/dev/null:rw": "ok", mem + ":r": eperm})
	attached(t, g, 1)

	// Unplug: removed again → denied.
	if err := g.Update(base); err != nil {
		t.Fatal(err)
	}
	expect(t, inGroup(t, g, loop+":rw", "/dev/null:rw"), map[string]string{loop + ":rw": eperm, "/dev/null:rw": "ok"})
	attached(t, g, 1)

	// Add kvm, tun and a read-only rule for the loop device (read allowed, write not).
	withKVM, err := Default(true, true, false)
	if err != nil {
		t.Fatal(err)
	}
	ro, err := BlockDevice(loop, "r")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Update(append(withKVM, ro)); err != nil {
		t.Fatal(err)
	}
	got := inGroup(t, g, loop+":r", loop+":rw", loop+":w", "/dev/kvm:rw", "/dev/net/tun:rw", mem+":r", "/dev/null:rw")
	expect(t, got, map[string]string{loop + ":r": "ok", loop + ":rw": eperm, loop + ":w": eperm, mem + ":r": eperm, "/dev/null:rw": "ok"})
	for _, d := range []string{"/dev/kvm", "/dev/net/tun"} {
		if _, err := os.Stat(d); err == nil {
			expect(t, got, map[string]string{d + ":rw": "ok"})
		}
	}
	if got := g.Allowlist(); len(got) != len(withKVM)+1 {
		t.Fatalf("Allowlist() = %v", got)
	}

	// Down to nothing: even /dev/null is denied.
	if err := g.Update(Allowlist{}); err != nil {
		t.Fatal(err)
	}
	expect(t, inGroup(t, g, "/dev/null:rw", "/dev/kvm:rw"), map[string]string{"/dev/null:rw": eperm})
	attached(t, g, 1)
	parentUnaffected(t, "/dev/null", mem, loop)
}

func attached(t *testing.T, g *Group, want int) {
	t.Helper()
	ids, err := g.programs()
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != want {
		t.Fatalf("%d device programs attached, want %d", len(ids), want)
	}
}

func TestRemove(t *testing.T) {
	needRoot(t)
	g, err := Create("", fmt.Sprintf("kemu-test-%d-remove", os.Getpid()), Allowlist{Null})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Create("", filepath.Base(g.Path()), Allowlist{Null}); !errors.Is(err, os.ErrExist) {
		t.Fatalf("second Create with the same name: %v", err)
	}
	// A process still inside: Remove waits for it (and kills nothing).
	fd, _ := g.FD()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("cat")
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	procs, err := os.ReadFile(filepath.Join(g.Path(), "cgroup.procs"))
	if err != nil || strings.TrimSpace(string(procs)) != fmt.Sprint(cmd.Process.Pid) {
		t.Fatalf("cgroup.procs = %q, %v; want %d", procs, err, cmd.Process.Pid)
	}
	old := RemoveTimeout
	RemoveTimeout = 0
	if err := g.Remove(); err == nil || !strings.Contains(err.Error(), fmt.Sprint(cmd.Process.Pid)) {
		t.Fatalf("Remove of a populated cgroup: %v", err)
	}
	RemoveTimeout = old
	done := make(chan error, 1)
	go func() { done <- g.Remove() }()
	w.Close() // the process exits
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(g.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("cgroup directory left: %v", err)
	}
	if err := g.Remove(); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
	if _, err := g.FD(); err == nil {
		t.Fatal("FD after Remove")
	}
	if err := g.Update(Allowlist{Null}); err == nil {
		t.Fatal("Update after Remove")
	}
}

func TestCreateErrors(t *testing.T) {
	for _, name := range []string{"", ".", "..", "a/b"} {
		if _, err := Create("", name, Allowlist{Null}); err == nil {
			t.Errorf("name %q accepted", name)
		}
	}
	if _, err := Create(t.TempDir(), "x", Allowlist{Null}); !errors.Is(err, ErrNoCgroup2) {
		t.Errorf("parent on tmpfs/ext4: %v", err)
	}
}

func TestProcsStatsKill(t *testing.T) {
	needRoot(t)
	g, err := Create("", fmt.Sprintf("kemu-test-%d-kill", os.Getpid()), Allowlist{Null})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Remove() })
	fd, _ := g.FD()
	// Some work first, so the cgroup has CPU time to show, then wait.
	cmd := exec.Command("sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; exec sleep 600")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	procs, err := g.Procs()
	if err != nil || len(procs) != 1 || procs[0] != cmd.Process.Pid {
		t.Fatalf("Procs = %v, %v; want [%d]", procs, err, cmd.Process.Pid)
	}
	for end := time.Now().Add(30 * time.Second); ; {
		st, err := g.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if st.CPU != nil && st.CPU.UsageUsec > 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("no CPU usage in the cgroup of a busy process: %+v", st.CPU)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("after Kill: %v, want SIGKILL", err)
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(g.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("cgroup directory left: %v", err)
	}
}
