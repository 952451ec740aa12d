//go:build qemu

package launcher

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// An incoming start: the normal command line plus -incoming defer, QEMU
// left paused in run state inmigrate (QMP query-status), the domain Paused
// for Migration; never resumed by the launcher. Killing it leaves nothing
// behind.
func TestStartIncoming(t *testing.T) {
	vmi := parseVMI(t, `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: incoming}
spec:
  domain:
    memory: {guest: 128Mi}
    devices:
      autoattachPodInterface: false
      disks: [{name: root, disk: {bus: virtio}}]
  volumes:
  - {name: root, containerDisk: {image: "oci:_out/testguest/oci/containerdisk"}}
`)
	cfg := newConfig(t, vmi)
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, stepTimeout)
	if err := l.StartIncoming(ctx); err != nil {
		t.Fatalf("incoming start: %v", err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			_, _ = l.Kill(ctxFor(t, stepTimeout))
		}
	})
	argv := l.Argv()
	if i := slices.Index(argv, "-incoming"); i < 0 || i+1 >= len(argv) || argv[i+1] != "defer" || !slices.Contains(argv, "-S") {
		t.Errorf("argv lacks -S -incoming defer: %s", strings.Join(argv, " "))
	}
	// QEMU inherited its QMP socket listening; the launcher keeps no copy.
	if !slices.ContainsFunc(argv, func(a string) bool { return strings.HasPrefix(a, "socket,id=qmp,fd=") }) || l.qmpListener != nil {
		t.Errorf("QMP socket not handed to QEMU as an fd (launcher's copy %v): %s", l.qmpListener, strings.Join(argv, " "))
	}
	if fi, err := os.Stat(l.paths.QMP); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("QMP socket %s: %v %v, want mode 0600", l.paths.QMP, fi.Mode(), err)
	}
	st, err := l.Monitor().QueryStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != "inmigrate" || st.Running {
		t.Errorf("query-status: %+v, want inmigrate and not running", st)
	}
	d := l.Domain()
	if d.State != StatePaused || d.Reason != ReasonMigration || d.PID <= 0 {
		t.Errorf("domain after an incoming start: %s (pid %d), want Paused (Migration)", d, d.PID)
	}
	var phases []string
	for _, p := range l.Phases {
		phases = append(phases, p.Name)
	}
	if !slices.Equal(phases, []string{"prepare", "exec", "qmp-connect", "attach", "verify"}) {
		t.Errorf("phases %v: an incoming start is not resumed", phases)
	}
	pid, cg := d.PID, l.DeviceCgroup()

	d, err = l.Kill(ctx)
	killed = true
	if err != nil {
		t.Fatal(err)
	}
	if d.State != StateShutoff || d.Reason != ReasonHostRequest {
		t.Errorf("after kill: %s", d)
	}
	if alive(pid) {
		t.Errorf("QEMU (pid %d) still runs", pid)
	}
	if _, err := os.Stat(cfg.Dir); !os.IsNotExist(err) {
		t.Errorf("runtime dir left: %v", err)
	}
	if cg != "" {
		if _, err := os.Stat(cg); !os.IsNotExist(err) {
			t.Errorf("device cgroup %s left behind (%v)", cg, err)
		}
	}
}
