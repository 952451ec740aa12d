//go:build qemu

package launcher

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kemu-dev/kemu/qmp"
	"github.com/kemu-dev/kemu/test/testguest"
)

// The first domain a watcher sees with status completed carries QEMU's
// final figures: total and downtime (from the source's vCPU stop to the
// end of the stream, so never 0 under TCG), not the last pass's.
func TestMigrationFiguresAtCompletion(t *testing.T) {
	src, _ := bootedSource(t, kbootMigrationVMI)
	dst := startTarget(t, kbootMigrationVMI)
	w := src.l.Watch(false)
	if err := src.l.Migrate(ctxFor(t, stepTimeout), dst.at, MigrationOptions{}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	d, err := w.WaitFor(ctxFor(t, migrationTimeout), migrationStatus(qmp.MigrationStatusCompleted, qmp.MigrationStatusFailed, qmp.MigrationStatusCancelled))
	if err != nil {
		t.Fatal(err)
	}
	m := d.Migration
	t.Logf("first completed domain: total %s, downtime %s, setup %s, %d passes", m.Total, m.Downtime, m.Setup, m.Passes)
	if m.Status != qmp.MigrationStatusCompleted || m.Downtime <= 0 || m.Total < m.Downtime {
		t.Errorf("completed without QEMU's final figures: %+v", m)
	}
	waitDomain(t, dst.l, "the target running", InState(StateRunning))
	if _, err := src.l.FinalizeMigration(ctxFor(t, stepTimeout)); err != nil {
		t.Error(err)
	}
}

// The completion timeout without post-copy allowed cancels: the source
// keeps the guest (Running, MigrationFailed, same QEMU, ticks go on).
func TestMigrationCompletionTimeoutCancels(t *testing.T) {
	src, _ := bootedSource(t, kbootMigrationVMI)
	pid := src.l.Domain().PID
	dst := startTarget(t, kbootMigrationVMI)
	opts := MigrationOptions{Bandwidth: 1 << 20, CompletionTimeoutPerGiB: 3 * time.Second}
	if err := src.l.Migrate(ctxFor(t, stepTimeout), dst.at, opts); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	d := waitDomain(t, src.l, "the source back", func(d Domain) bool { return d.State != StateMigrating })
	if d.State != StateRunning || d.Reason != ReasonMigrationFailed || d.PID != pid || !strings.Contains(d.Message, "completion timeout") {
		t.Fatalf("source after the completion timeout: %s (pid %d, was %d) %+v", d, d.PID, pid, d.Migration)
	}
	if d.Migration.Mode != ModePreCopy {
		t.Errorf("mode %s, want pre-copy", d.Migration.Mode)
	}
	src.waitAfter(bootTimeout, len(src.w.Markers()), testguest.IsKind("tick"))
	waitDomain(t, dst.l, "the target's end", InState(StateShutoff))
}

// The target dies after the source's migration completed but before it
// ran the guest (a plain QEMU target that is never resumed, then killed):
// CancelMigration, the documented path, resumes the source (Running,
// MigrationFailed, same QEMU) and FinalizeMigration is refused.
func TestMigrationTargetKilledAfterCompleted(t *testing.T) {
	argv, runDir := launcherArgv(t, kbootMigrationVMI)
	src, _ := bootedSource(t, kbootMigrationVMI)
	pid := src.l.Domain().PID
	dst := startPlain(t, argv, runDir, true)
	sock := dst.listen(t, false)
	ctx := ctxFor(t, stepTimeout)
	if err := src.l.Migrate(ctx, MigrationTarget{MainSocket: sock}, MigrationOptions{}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	d := waitDomain(t, src.l, "the source's completion", migrationStatus(qmp.MigrationStatusCompleted, qmp.MigrationStatusFailed, qmp.MigrationStatusCancelled))
	if d.Migration.Status != qmp.MigrationStatusCompleted || d.State != StateMigrating {
		t.Fatalf("source: %s %+v", d, d.Migration)
	}
	dst.kill()
	if err := src.l.CancelMigration(ctxFor(t, stepTimeout)); err != nil {
		t.Fatalf("cancel after completed: %v", err)
	}
	d = src.l.Domain()
	if d.State != StateRunning || d.Reason != ReasonMigrationFailed || d.PID != pid {
		t.Fatalf("source after the target died: %s (pid %d, was %d)", d, d.PID, pid)
	}
	src.waitAfter(bootTimeout, len(src.w.Markers()), testguest.IsKind("tick"))
	if _, err := src.l.FinalizeMigration(ctxFor(t, stepTimeout)); !errors.Is(err, ErrMigrationState) {
		t.Errorf("finalize after the source resumed: %v, want ErrMigrationState", err)
	}
}

// A guest dirtying its RAM faster than the bandwidth moves it, with a
// tight downtime limit: pre-copy alone does not converge and the
// completion timeout cancels (source Running); with auto-converge QEMU
// throttles the vCPU and the migration completes.
func TestMigrationDirtyingGuestAutoConverge(t *testing.T) {
	yaml := dirtyingGuest(dirtyRate, dirtySize)
	for _, ac := range []bool{false, true} {
		opts := dirtyOptions(ac)
		// Without auto-converge it cannot complete: half the benchmark's
		// timeout shows it. With it, the timeout is hang protection only
		// (it completed in ~50 s of the benchmark's 60 on 2 shared cores).
		if ac {
			opts.CompletionTimeoutPerGiB = 2 * dirtyTimeout
		} else {
			opts.CompletionTimeoutPerGiB = dirtyTimeout / 2
		}
		r := launcherMigration(t, yaml, testguest.IsKind("dirty"), directPath, opts)
		t.Logf("auto-converge %t: completed %t in %s, %d passes, downtime %s, remaining %d, source %s",
			ac, r.complete, r.total, r.m.Passes, r.m.Downtime, r.m.BytesRemaining, r.source)
		switch {
		case ac && !r.complete:
			t.Errorf("with auto-converge the migration did not complete: %s %+v", r.source, r.m)
		case !ac && r.complete:
			t.Errorf("without auto-converge the migration completed: %+v", r.m)
		case !ac && (r.source.State != StateRunning || !strings.Contains(r.source.Message, "completion timeout")):
			t.Errorf("source after the completion timeout: %s", r.source)
		}
	}
}

// The completion timeout with post-copy allowed switches to post-copy
// (mode reported), CancelMigration is then refused, and the migration
// completes. The target is a plain QEMU run by the test as root: QEMU
// 7.2 needs userfaultfd for post-copy, which the launcher's QEMU user
// (uid 107, no capabilities) gets only where vm.unprivileged_userfaultfd
// is 1; the launcher's own target offers it when it can
// (migration_target.go).
func TestMigrationCompletionTimeoutPostCopy(t *testing.T) {
	argv, runDir := launcherArgv(t, kbootMigrationVMI)
	src, tick := bootedSource(t, kbootMigrationVMI)
	dst := startPlain(t, argv, runDir, true)
	sock := dst.listen(t, true)
	ctx := ctxFor(t, migrationTimeout)
	dstEv := dst.mon.Subscribe(qmp.WithFilter(qmp.AnyOf(qmp.EventMigration)), qmp.WithBuffer(64))
	defer dstEv.Close()
	opts := MigrationOptions{Bandwidth: 4 << 20, CompletionTimeoutPerGiB: 3 * time.Second, AllowPostCopy: true}
	if err := src.l.Migrate(ctx, MigrationTarget{MainSocket: sock}, opts); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	d := waitDomain(t, src.l, "post-copy", func(d Domain) bool { return d.Migration != nil && d.Migration.Mode == ModePostCopy })
	t.Logf("switched to post-copy: %+v", d.Migration)
	if err := src.l.CancelMigration(ctxFor(t, stepTimeout)); !errors.Is(err, ErrPostCopy) {
		t.Errorf("cancel in post-copy: %v, want ErrPostCopy", err)
	}
	d = waitDomain(t, src.l, "the source's completion", migrationStatus(qmp.MigrationStatusCompleted, qmp.MigrationStatusFailed, qmp.MigrationStatusCancelled))
	if m := d.Migration; m.Status != qmp.MigrationStatusCompleted || m.Mode != ModePostCopy || m.Downtime <= 0 {
		t.Fatalf("source after post-copy: %s %+v", d, m)
	}
	if _, err := dstEv.Wait(ctx, func(e qmp.Event) bool { return e.String("status") == qmp.MigrationStatusCompleted }); err != nil {
		t.Fatalf("target's completion: %v", err)
	}
	if err := dst.mon.Cont(ctx); err != nil {
		t.Fatal(err)
	}
	next, err := dst.w.Wait(ctx, testguest.IsKind("tick"))
	if err != nil || tickN(t, next) <= tickN(t, tick) {
		t.Errorf("target tick %v after source tick %s: %v", next, tick, err)
	}
	if _, err := src.l.FinalizeMigration(ctxFor(t, stepTimeout)); err != nil {
		t.Error(err)
	}
}
