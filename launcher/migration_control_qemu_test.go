//go:build qemu

package launcher

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kemu-dev/kemu/qmp"
	"github.com/kemu-dev/kemu/test/testguest"
)

// relay passes connections on a new unix socket (world-connectable, in
// its own directory) to target until cut closes the listener and every
// connection (a node agent or the path between the nodes gone). With
// limit >= 0 it passes only the first limit bytes of each connection
// towards target, then stops reading (a peer that stalls).
func relay(t *testing.T, target string, limit int64) (path string, cut func()) {
	t.Helper()
	dir := shortDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(dir, "relay.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o777); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	var once sync.Once
	cut = func() {
		once.Do(func() {
			ln.Close()
			mu.Lock()
			defer mu.Unlock()
			for _, c := range conns {
				c.Close()
			}
		})
	}
	t.Cleanup(cut)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("unix", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, up)
			mu.Unlock()
			go func() { _, _ = io.Copy(c, up) }()
			go func() {
				if limit >= 0 {
					_, _ = io.CopyN(up, c, limit)
					return
				}
				_, _ = io.Copy(up, c)
			}()
		}
	}()
	return path, cut
}

// The control channel to the target goes away while RAM moves (bandwidth
// capped): the source cancels at once and keeps the guest (Running,
// MigrationFailed, same QEMU, ticks going on); the target's incoming
// migration fails and it ends.
func TestMigrationControlChannelLost(t *testing.T) {
	src, _ := bootedSource(t, migrationVMI)
	pid := src.l.Domain().PID
	dst := startTarget(t, migrationVMI)
	control, cut := relay(t, dst.at.ControlSocket, -1)
	to := dst.at
	to.ControlSocket = control
	if err := src.l.Migrate(ctxFor(t, stepTimeout), to, MigrationOptions{Bandwidth: 1 << 20}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	waitDomain(t, src.l, "RAM moving", migrationStatus(qmp.MigrationStatusActive))
	cut()
	d := waitDomain(t, src.l, "the source back", func(d Domain) bool { return d.State != StateMigrating })
	if d.State != StateRunning || d.Reason != ReasonMigrationFailed || d.PID != pid || !strings.Contains(d.Message, "control channel") {
		t.Fatalf("source after the control channel went away: %s (pid %d, was %d) %+v", d, d.PID, pid, d.Migration)
	}
	td := waitDomain(t, dst.l, "the target's end", InState(StateShutoff))
	if td.Reason != ReasonMigrationFailed {
		t.Errorf("target: %s", td)
	}
	src.waitAfter(bootTimeout, len(src.w.Markers()), testguest.IsKind("tick"))
}

// A target that is not waiting (it already runs a guest, or never
// answers) is refused by Migrate before anything moves.
func TestMigrationControlChannelRefused(t *testing.T) {
	src, _ := bootedSource(t, kbootMigrationVMI)
	pid := src.l.Domain().PID
	dir := shortDir(t)
	cases := map[string]string{
		"running": `{"state":"running"}` + "\n",
		"garbage": strings.Repeat("x", maxControlLine+1),
	}
	for name, first := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name+".sock")
			ln, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				_, _ = io.WriteString(c, first)
				_, _ = io.Copy(io.Discard, c)
			}()
			err = src.l.Migrate(ctxFor(t, stepTimeout), MigrationTarget{MainSocket: filepath.Join(dir, "none.sock"), ControlSocket: path}, MigrationOptions{})
			d := src.l.Domain()
			if err == nil || !strings.Contains(err.Error(), "control channel") || d.State != StateRunning || d.PID != pid {
				t.Fatalf("migrate to a target that is not waiting: %v; source %s", err, d)
			}
		})
	}
}

// The target says failed after the source completed (its QEMU is gone
// before it ran the guest): the source resumes by itself, without
// CancelMigration. The target is a plain QEMU killed by the test; the
// control channel is played by the test (the launcher's own target cannot
// fail between QEMU's completed and its cont on request).
func TestMigrationTargetFailedAfterCompleted(t *testing.T) {
	argv, runDir := launcherArgv(t, kbootMigrationVMI)
	src, _ := bootedSource(t, kbootMigrationVMI)
	pid := src.l.Domain().PID
	dst := startPlain(t, argv, runDir, true)
	sock := dst.listen(t, false)
	control := filepath.Join(shortDir(t), "control.sock")
	ln, err := net.Listen("unix", control)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	say := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.WriteString(c, `{"state":"waiting"}`+"\n")
		_, _ = io.WriteString(c, <-say)
		_, _ = io.Copy(io.Discard, c)
	}()
	if err := src.l.Migrate(ctxFor(t, stepTimeout), MigrationTarget{MainSocket: sock, ControlSocket: control}, MigrationOptions{}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	d := waitDomain(t, src.l, "the source's completion", migrationStatus(qmp.MigrationStatusCompleted, qmp.MigrationStatusFailed, qmp.MigrationStatusCancelled))
	if d.Migration.Status != qmp.MigrationStatusCompleted || d.State != StateMigrating {
		t.Fatalf("source: %s %+v", d, d.Migration)
	}
	dst.kill()
	say <- `{"state":"failed","message":"QEMU exited"}` + "\n"
	d = waitDomain(t, src.l, "the source back", func(d Domain) bool { return d.State != StateMigrating })
	if d.State != StateRunning || d.Reason != ReasonMigrationFailed || d.PID != pid || !strings.Contains(d.Message, "QEMU exited") {
		t.Fatalf("source after the target said failed: %s (pid %d, was %d)", d, d.PID, pid)
	}
	src.waitAfter(bootTimeout, len(src.w.Markers()), testguest.IsKind("tick"))
	if _, err := src.l.FinalizeMigration(ctxFor(t, stepTimeout)); err == nil {
		t.Error("finalize after the source resumed succeeded")
	}
}

// Post-copy into the launcher's own target: QEMU runs as its own user
// without capabilities, so userfaultfd needs vm.unprivileged_userfaultfd
// = 1 on the target node (as for KubeVirt: a node setting, see
// docs/migration.md). The test sets it for its duration. The completion
// timeout switches to post-copy and the target runs the guest (Running,
// Migrated) with its ticks going on.
func TestMigrationPostCopyLauncherTarget(t *testing.T) {
	allowUserfaultfd(t)
	src, tick := bootedSource(t, kbootMigrationVMI)
	dst := startTarget(t, kbootMigrationVMI)
	opts := MigrationOptions{Bandwidth: 4 << 20, CompletionTimeoutPerGiB: 3 * time.Second, AllowPostCopy: true}
	if err := src.l.Migrate(ctxFor(t, stepTimeout), dst.at, opts); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	d := waitDomain(t, src.l, "the source's completion", migrationStatus(qmp.MigrationStatusCompleted, qmp.MigrationStatusFailed, qmp.MigrationStatusCancelled))
	if m := d.Migration; m.Status != qmp.MigrationStatusCompleted || m.Mode != ModePostCopy {
		t.Fatalf("source: %s %+v", d, m)
	}
	td := waitDomain(t, dst.l, "the target running", InState(StateRunning, StateShutoff))
	if td.State != StateRunning || td.Reason != ReasonMigrated || td.Migration.Mode != ModePostCopy {
		t.Fatalf("target: %s %+v", td, td.Migration)
	}
	t.Logf("post-copy into the launcher's target: total %s, downtime %s, %d passes", d.Migration.Total, d.Migration.Downtime, d.Migration.Passes)
	next, err := dst.w.Wait(ctxFor(t, bootTimeout), testguest.IsKind("tick"))
	if err != nil || tickN(t, next) <= tickN(t, tick) {
		t.Errorf("target tick %v after source tick %s: %v", next, tick, err)
	}
	if _, err := src.l.FinalizeMigration(ctxFor(t, stepTimeout)); err != nil {
		t.Error(err)
	}
}

// allowUserfaultfd sets vm.unprivileged_userfaultfd to 1 until tb ends
// (restoring the value it found): post-copy's target QEMU runs as its own
// user without capabilities.
func allowUserfaultfd(tb testing.TB) {
	tb.Helper()
	const sysctl = "/proc/sys/vm/unprivileged_userfaultfd"
	old, err := os.ReadFile(sysctl)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(sysctl, []byte("1"), 0); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := os.WriteFile(sysctl, old, 0); err != nil {
			tb.Errorf("restoring %s: %v", sysctl, err)
		}
	})
}

// A cancel that comes after the source completed, while the target runs
// the guest (an abort racing the switchover): refused, so the guest never
// runs twice; FinalizeMigration then ends the source.
func TestMigrationCancelAfterTargetRuns(t *testing.T) {
	src, _ := bootedSource(t, kbootMigrationVMI)
	dst := startTarget(t, kbootMigrationVMI)
	if err := src.l.Migrate(ctxFor(t, stepTimeout), dst.at, MigrationOptions{}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	d := waitDomain(t, src.l, "the source's completion", migrationStatus(qmp.MigrationStatusCompleted, qmp.MigrationStatusFailed, qmp.MigrationStatusCancelled))
	if d.Migration.Status != qmp.MigrationStatusCompleted {
		t.Fatalf("source: %s %+v", d, d.Migration)
	}
	if td := waitDomain(t, dst.l, "the target running", InState(StateRunning, StateShutoff)); td.State != StateRunning {
		t.Fatalf("target: %s", td)
	}
	err := src.l.CancelMigration(ctxFor(t, stepTimeout))
	if !errors.Is(err, ErrMigrationState) {
		t.Fatalf("cancel while the target runs: %v, want ErrMigrationState", err)
	}
	if d := src.l.Domain(); d.State != StateMigrating {
		t.Errorf("source after the refused cancel: %s", d)
	}
	if sd, err := src.l.FinalizeMigration(ctxFor(t, stepTimeout)); err != nil || sd.State != StateShutoff || sd.Reason != ReasonMigrated {
		t.Errorf("finalize: %s %v", sd, err)
	}
}
