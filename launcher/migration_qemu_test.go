//go:build qemu

package launcher

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kemu-dev/kemu/launcher/cmdline"
	"github.com/kemu-dev/kemu/qmp"
	"github.com/kemu-dev/kemu/test/testguest"
)

// migrationTimeout bounds one migration of a small guest under TCG.
const migrationTimeout = 180 * time.Second

const migrationVMI = `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: mig}
spec:
  domain:
    memory: {guest: 256Mi}
    devices:
      autoattachPodInterface: false
      disks:
      - {name: root, bootOrder: 1, disk: {bus: virtio}}
      - {name: scratch, serial: scratch-1, disk: {bus: virtio}}
  volumes:
  - {name: root, containerDisk: {image: "oci:_out/testguest/oci/containerdisk"}}
  - {name: scratch, emptyDisk: {capacity: 64Mi}}
`

// target is a migration target launcher with its console watched.
type target struct {
	l  *Launcher
	at MigrationTarget
	w  *testguest.Watcher
}

func startTarget(t testing.TB, yaml string) *target {
	t.Helper()
	return startTargetConfig(t, newConfig(t, parseVMI(t, yaml)))
}

func startTargetConfig(t testing.TB, cfg Config) *target {
	t.Helper()
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	at, err := l.StartMigrationTarget(ctxFor(t, stepTimeout))
	if err != nil {
		t.Fatalf("migration target: %v", err)
	}
	t.Cleanup(func() {
		if _, err := l.Kill(ctxFor(t, stepTimeout)); err != nil {
			t.Errorf("kill target: %v", err)
		}
	})
	out, _, detach, err := l.Console()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(detach)
	return &target{l: l, at: at, w: testguest.NewChanWatcher(out)}
}

// bootedSource starts the source guest and waits for its first tick.
func bootedSource(t testing.TB, yaml string) (*vm, testguest.Marker) {
	return bootedSourceConfig(t, newConfig(t, parseVMI(t, yaml)))
}

func bootedSourceConfig(t testing.TB, cfg Config) (*vm, testguest.Marker) {
	src := start(t, cfg)
	src.wait(bootTimeout, testguest.IsKind("ready"))
	return src, src.wait(bootTimeout, testguest.IsKind("tick"))
}

func waitDomain(t testing.TB, l *Launcher, what string, f func(Domain) bool) Domain {
	t.Helper()
	d, err := l.Watch(false).WaitFor(ctxFor(t, migrationTimeout), f)
	if err != nil {
		t.Fatalf("waiting for %s: %v (domain %s, migration %+v)", what, err, l.Domain(), l.Domain().Migration)
	}
	return d
}

func migrationStatus(statuses ...string) func(Domain) bool {
	return func(d Domain) bool {
		if d.Migration == nil {
			return false
		}
		for _, s := range statuses {
			if d.Migration.Status == s {
				return true
			}
		}
		return false
	}
}

func tickN(t *testing.T, m testguest.Marker) int64 {
	t.Helper()
	n, err := m.Int("n")
	if err != nil {
		t.Fatalf("tick %s: %v", m, err)
	}
	return n
}

// An idle 256 MiB guest with a containerDisk and an emptyDisk moves to a
// target launcher over unix sockets: the target runs it (Running,
// Migrated) with its tick counter going on and no new boot; the source
// waits paused until FinalizeMigration ends it (Shutoff, Migrated).
func TestMigrationIdleGuest(t *testing.T) {
	src, tick := bootedSource(t, migrationVMI)
	migrateIdle(t, src, tick, startTarget(t, migrationVMI))
}

// The disk tuning of issue 22 moves with the guest: iothreads (the target
// builds them from the same VMI, with the same ids), one queue per vCPU,
// cache none, and an ephemeral volume's overlay, copied over the disk
// channel like a containerDisk's onto the target's own overlay over the
// same (shared) claim.
const migrationTunedVMI = `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: mig-tuned}
spec:
  domain:
    ioThreadsPolicy: auto
    cpu: {cores: 2}
    memory: {guest: 256Mi}
    devices:
      autoattachPodInterface: false
      blockMultiQueue: true
      disks:
      - {name: root, bootOrder: 1, disk: {bus: virtio}}
      - {name: eph, serial: eph-1, dedicatedIOThread: true, disk: {bus: virtio}}
  volumes:
  - {name: root, containerDisk: {image: "oci:_out/testguest/oci/containerdisk"}}
  - {name: eph, ephemeral: {persistentVolumeClaim: {claimName: golden}}}
`

func TestMigrationDiskTuning(t *testing.T) {
	pvcRoot := shortDir(t)
	if err := os.MkdirAll(filepath.Join(pvcRoot, "golden"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pvcRoot, "golden", "disk.img"), make([]byte, 16<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	config := func() Config {
		cfg := newConfig(t, parseVMI(t, migrationTunedVMI))
		cfg.PVCRoot = pvcRoot
		return cfg
	}
	src, tick := bootedSourceConfig(t, config())
	dst := startTargetConfig(t, config())
	copied, err := src.l.copiedDisks()
	if err != nil || len(copied) != 2 {
		t.Fatalf("copied disks %+v (%v): want the containerDisk's and the ephemeral overlay", copied, err)
	}
	iothreads := func(l *Launcher) []string {
		var threads []struct {
			ID string `json:"id"`
		}
		if err := l.Monitor().Execute(ctxFor(t, stepTimeout), "query-iothreads", nil, &threads); err != nil {
			t.Fatalf("query-iothreads: %v", err)
		}
		var ids []string
		for _, th := range threads {
			ids = append(ids, th.ID)
		}
		slices.Sort(ids)
		return ids
	}
	srcThreads := iothreads(src.l)
	if dstThreads := iothreads(dst.l); len(srcThreads) != 2 || !slices.Equal(srcThreads, dstThreads) {
		t.Errorf("iothreads: source %q, target %q", srcThreads, dstThreads)
	}
	migrateIdle(t, src, tick, dst)
	var link string
	if err := dst.l.Monitor().Execute(ctxFor(t, stepTimeout), "qom-get",
		map[string]any{"path": "/machine/peripheral/" + cmdline.DiskDeviceID("eph"), "property": "iothread"}, &link); err != nil || link != "/objects/"+cmdline.IOThreadID(2) {
		t.Errorf("the target's ephemeral disk: iothread %q (%v)", link, err)
	}
}

// migrateIdle migrates a booted, idle guest to dst and checks that it runs
// on there without booting again.
func migrateIdle(t *testing.T, src *vm, tick testguest.Marker, dst *target) {
	t.Helper()
	if dst.at.DiskSocket == "" {
		t.Fatal("no NBD socket: the local disks must be copied")
	}
	t0 := time.Now()
	if err := src.l.Migrate(ctxFor(t, stepTimeout), dst.at, MigrationOptions{}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	d := waitDomain(t, src.l, "the source's completion", migrationStatus(qmp.MigrationStatusCompleted, qmp.MigrationStatusFailed, qmp.MigrationStatusCancelled))
	if m := d.Migration; m.Status != qmp.MigrationStatusCompleted || d.State != StateMigrating {
		t.Fatalf("source after the migration: %s %+v", d, m)
	}
	m := src.l.Domain().Migration
	t.Logf("migrated in %s: total %s, downtime %s, setup %s, RAM %d/%d bytes, %d passes, disks %d bytes",
		time.Since(t0), m.Total, m.Downtime, m.Setup, m.BytesTransferred, m.BytesTotal, m.Passes, m.DiskBytesTotal)
	if m.Total <= 0 || m.BytesTransferred <= 0 {
		t.Errorf("final figures missing: %+v", m)
	}
	td := waitDomain(t, dst.l, "the target running", InState(StateRunning, StateShutoff))
	if td.State != StateRunning || td.Reason != ReasonMigrated {
		t.Fatalf("target: %s", td)
	}
	if st, err := src.l.Monitor().QueryStatus(ctxFor(t, stepTimeout)); err != nil || st.Running {
		t.Errorf("source still runs the guest: %+v %v", st, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	next, err := dst.w.Wait(ctx, testguest.IsKind("tick"))
	if err != nil {
		t.Fatalf("no tick on the target: %v\n%s", err, dst.w.Log())
	}
	if tickN(t, next) <= tickN(t, tick) {
		t.Errorf("target tick %s after source tick %s: the counter went back", next, tick)
	}
	if boots := dst.w.Find(testguest.IsKind("boot")); len(boots) > 0 {
		t.Errorf("the guest booted again on the target: %v", boots)
	}
	sd, err := src.l.FinalizeMigration(ctxFor(t, stepTimeout))
	if err != nil || sd.State != StateShutoff || sd.Reason != ReasonMigrated {
		t.Errorf("finalize: %s %v", sd, err)
	}
}

// The target's QEMU killed while RAM moves (bandwidth capped): the source
// keeps the guest (Running, MigrationFailed), the same QEMU, ticks going on.
func TestMigrationTargetKilled(t *testing.T) {
	src, _ := bootedSource(t, migrationVMI)
	pid := src.l.Domain().PID
	dst := startTarget(t, migrationVMI)
	if err := src.l.Migrate(ctxFor(t, stepTimeout), dst.at, MigrationOptions{Bandwidth: 1 << 20}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	waitDomain(t, src.l, "RAM moving", migrationStatus(qmp.MigrationStatusActive))
	if _, err := dst.l.Kill(ctxFor(t, stepTimeout)); err != nil {
		t.Fatal(err)
	}
	d := waitDomain(t, src.l, "the source back", func(d Domain) bool { return d.State != StateMigrating })
	if d.State != StateRunning || d.Reason != ReasonMigrationFailed || d.PID != pid {
		t.Fatalf("source after the target died: %s (pid %d, was %d)", d, d.PID, pid)
	}
	t.Logf("source: %s; migration %+v", d, d.Migration)
	seq := len(src.w.Markers())
	src.waitAfter(bootTimeout, seq, testguest.IsKind("tick"))
	if jobs, err := src.l.Monitor().QueryBlockJobs(ctxFor(t, stepTimeout)); err != nil || len(jobs) > 0 {
		t.Errorf("mirror jobs left: %+v %v", jobs, err)
	}
}

// CancelMigration while RAM moves (bandwidth capped): the source keeps the
// guest (Running, MigrationCanceled) in the same QEMU; the target's
// incoming migration fails and it ends (Shutoff, MigrationFailed).
func TestMigrationCancel(t *testing.T) {
	src, _ := bootedSource(t, migrationVMI)
	pid := src.l.Domain().PID
	dst := startTarget(t, migrationVMI)
	if err := src.l.Migrate(ctxFor(t, stepTimeout), dst.at, MigrationOptions{Bandwidth: 1 << 20}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	waitDomain(t, src.l, "RAM moving", migrationStatus(qmp.MigrationStatusActive))
	// Stats has query-migrate's figures of now (the metrics'): they move
	// between two calls, unlike the domain's copy of the last pass.
	first, err := src.l.Stats(ctxFor(t, stepTimeout))
	if err != nil || first.Migration == nil || first.Migration.BytesTotal <= 0 || !qmp.MigrationStatusMoving(first.Migration.Status) {
		t.Fatalf("stats while RAM moves: %v %+v", err, first.Migration)
	}
	for ctx := ctxFor(t, stepTimeout); ; {
		st, err := src.l.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Migration != nil && st.Migration.BytesTransferred > first.Migration.BytesTransferred {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the migration's transferred bytes stayed at %d", first.Migration.BytesTransferred)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err := src.l.CancelMigration(ctxFor(t, stepTimeout)); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	if st, err := src.l.Stats(ctxFor(t, stepTimeout)); err != nil || st.Migration != nil {
		t.Errorf("stats after the cancel: %v, migration %+v, want none", err, st.Migration)
	}
	d := src.l.Domain()
	if d.State != StateRunning || d.Reason != ReasonMigrationCanceled || d.PID != pid || d.Migration.Status != qmp.MigrationStatusCancelled {
		t.Fatalf("source after the cancel: %s (pid %d, was %d) %+v", d, d.PID, pid, d.Migration)
	}
	td := waitDomain(t, dst.l, "the target's end", InState(StateShutoff))
	if td.Reason != ReasonMigrationFailed {
		t.Errorf("target after the cancel: %s", td)
	}
	src.waitAfter(bootTimeout, len(src.w.Markers()), testguest.IsKind("tick"))
	if err := src.l.CancelMigration(ctxFor(t, stepTimeout)); !errors.Is(err, ErrMigrationState) {
		t.Errorf("a second cancel: %v, want ErrMigrationState", err)
	}
}

// A migration stream that stops moving (a peer that no longer reads):
// the progress timeout cancels it and the source keeps the guest.
func TestMigrationProgressTimeout(t *testing.T) {
	src, _ := bootedSource(t, migrationVMI)
	pid := src.l.Domain().PID
	dst := startTarget(t, migrationVMI)
	stalled, _ := relay(t, dst.at.MainSocket, 4<<20)
	opts := MigrationOptions{ProgressTimeout: 3 * time.Second}
	if err := src.l.Migrate(ctxFor(t, stepTimeout), MigrationTarget{MainSocket: stalled, DiskSocket: dst.at.DiskSocket, ControlSocket: dst.at.ControlSocket}, opts); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	d := waitDomain(t, src.l, "the source back", func(d Domain) bool { return d.State != StateMigrating })
	if d.State != StateRunning || d.Reason != ReasonMigrationFailed || d.PID != pid || !strings.Contains(d.Message, "no progress") {
		t.Fatalf("source after the stall: %s (pid %d, was %d) %+v", d, d.PID, pid, d.Migration)
	}
	src.waitAfter(bootTimeout, len(src.w.Markers()), testguest.IsKind("tick"))
}
