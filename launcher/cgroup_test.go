package launcher

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/kemu-dev/kemu/devices/cgroup"
)

// A launcher killed with SIGKILL cannot remove its QEMU's (empty) device
// cgroup; the next launcher beside it does. Needs root and cgroup2.
func TestStaleDeviceCgroupsAreRemoved(t *testing.T) {
	h, err := cgroup.Self()
	if err != nil {
		t.Fatalf("kemu needs a cgroup2 hierarchy: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root to make cgroups (make test runs as root)")
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(h.Dir, fmt.Sprintf("%stest-vm-%d-1", deviceCgroupPrefix, dead.Process.Pid))
	mine := filepath.Join(h.Dir, fmt.Sprintf("%stest-vm-%d-1", deviceCgroupPrefix, os.Getpid()))
	for _, d := range []string{stale, mine} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { os.Remove(stale); os.Remove(mine) })
	removeStaleDeviceCgroups()
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale cgroup of dead launcher %d not removed (%v)", dead.Process.Pid, err)
	}
	if _, err := os.Stat(mine); err != nil {
		t.Errorf("this launcher's own cgroup was removed: %v", err)
	}
}
