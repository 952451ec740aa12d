package cgroup

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// mountOwnHelper plays a launcher in a container without a cgroup2 mount:
// in its own mount namespace it detaches every cgroup2 mount, calls
// MountOwn(dir) and prints what it then sees.
func mountOwnHelper(dir string) int {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		fmt.Println("private mounts:", err)
		return 1
	}
	mi, _ := os.Open("/proc/self/mountinfo")
	mounts, err := ParseMountinfo(mi)
	mi.Close()
	if err != nil {
		fmt.Println(err)
		return 1
	}
	for _, m := range mounts {
		if err := unix.Unmount(m.Mountpoint, unix.MNT_DETACH); err != nil {
			fmt.Println("unmount", m.Mountpoint, err)
			return 1
		}
	}
	if _, err := Self(); err == nil {
		fmt.Println("a cgroup2 mount is still visible")
		return 1
	}
	mounted, err := MountOwn(dir)
	if err != nil || !mounted {
		fmt.Println("MountOwn:", mounted, err)
		return 1
	}
	h, err := Self()
	if err != nil {
		fmt.Println("Self after MountOwn:", err)
		return 1
	}
	fmt.Printf("dir %s\n", h.Dir)
	if err := os.Mkdir(filepath.Join(h.Dir, "qemu"), 0o755); err != nil {
		fmt.Println("mkdir:", err)
		return 1
	}
	defer os.Remove(filepath.Join(h.Dir, "qemu"))
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		fmt.Printf("entry %s\n", e.Name())
	}
	return 0
}

// A launcher without a cgroup2 mount mounts its container's subtree only:
// its own cgroup at the top, its children below, no sibling (another Pod)
// and nothing above.
func TestMountOwnShowsOnlyOwnSubtree(t *testing.T) {
	needRoot(t)
	self, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	container := filepath.Join(self.Dir, fmt.Sprintf("kemu-test-container-%d", os.Getpid()))
	other := filepath.Join(self.Dir, fmt.Sprintf("kemu-test-otherpod-%d", os.Getpid()))
	for _, d := range []string{container, filepath.Join(container, "inside"), other} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, d := range []string{filepath.Join(container, "inside"), container, other} {
			os.Remove(d)
		}
	})
	fd, err := unix.Open(container, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	mnt := filepath.Join(t.TempDir(), "cg2")
	cmd := exec.Command(os.Args[0], mnt)
	cmd.Env = append(os.Environ(), "KEMU_CGROUP_HELPER=mount-own")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd, Cloneflags: syscall.CLONE_NEWNS}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	got := out.String()
	if !strings.Contains(got, "dir "+mnt+"\n") {
		t.Errorf("the launcher's cgroup is not the top of the mount:\n%s", got)
	}
	for _, want := range []string{"entry inside\n", "entry qemu\n", "entry cgroup.procs\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q:\n%s", want, got)
		}
	}
	for _, bad := range []string{"kemu-test-otherpod", "kemu-test-container", "entry kubepods", "entry system.slice", "entry init.scope"} {
		if strings.Contains(got, bad) {
			t.Errorf("the mount shows %q, outside the launcher's own cgroup:\n%s", bad, got)
		}
	}
	// The mount was private to the helper's mount namespace.
	if _, err := os.Stat(filepath.Join(mnt, "cgroup.procs")); err == nil {
		t.Error("the mount leaked into the test's mount namespace")
	}
}
