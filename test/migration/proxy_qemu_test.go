//go:build qemu

package migration

import (
	"context"
	"testing"
	"time"

	"github.com/kemu-dev/kemu/launcher"
	"github.com/kemu-dev/kemu/qmp"
	"github.com/kemu-dev/kemu/test/testguest"
)

const idleVMI = `apiVersion: kemu.dev/v1alpha1
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

func startSource(ctx context.Context, l *launcher.Launcher) error { return l.Start(ctx) }

func startTarget(at *launcher.MigrationTarget) func(context.Context, *launcher.Launcher) error {
	return func(ctx context.Context, l *launcher.Launcher) (err error) {
		*at, err = l.StartMigrationTarget(ctx)
		return err
	}
}

func ended(statuses ...string) func(launcher.Domain) bool {
	return func(d launcher.Domain) bool {
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

// An idle 256 MiB guest moves from node-a to node-b through both node
// agents' proxies (TLS 1.3, node certificates from one CA): the target
// runs it with its ticks going on and no new boot, and FinalizeMigration
// ends the source.
func TestMigrationThroughProxies(t *testing.T) {
	ca := newCA(t)
	a, b := newNode(t, ca, "node-a"), newNode(t, ca, "node-b")
	src := newGuest(t, idleVMI, startSource)
	src.wait(t, testguest.IsKind("ready"))
	tick := src.wait(t, testguest.IsKind("tick"))
	var at launcher.MigrationTarget
	dst := newGuest(t, idleVMI, startTarget(&at))
	paths := proxied(t, a, b, src, at)

	t0 := time.Now()
	if err := src.l.Migrate(ctxFor(t, stepTimeout), via(paths), launcher.MigrationOptions{}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	d := waitDomain(t, src.l, "the source's completion", ended(qmp.MigrationStatusCompleted, qmp.MigrationStatusFailed, qmp.MigrationStatusCancelled))
	m := d.Migration
	if m.Status != qmp.MigrationStatusCompleted || d.State != launcher.StateMigrating {
		t.Fatalf("source after the migration: %s %+v", d, m)
	}
	t.Logf("migrated through the proxies in %s: total %s, downtime %s, setup %s, RAM %d/%d bytes, %d passes, disks %d bytes",
		time.Since(t0), m.Total, m.Downtime, m.Setup, m.BytesTransferred, m.BytesTotal, m.Passes, m.DiskBytesTotal)
	if m.Total <= 0 || m.BytesTransferred <= 0 {
		t.Errorf("final figures missing: %+v", m)
	}
	td := waitDomain(t, dst.l, "the target running", launcher.InState(launcher.StateRunning, launcher.StateShutoff))
	if td.State != launcher.StateRunning || td.Reason != launcher.ReasonMigrated {
		t.Fatalf("target: %s", td)
	}
	next := dst.wait(t, testguest.IsKind("tick"))
	if tickN(t, next) <= tickN(t, tick) {
		t.Errorf("target tick %s after source tick %s: the counter went back", next, tick)
	}
	if boots := dst.w.Find(testguest.IsKind("boot")); len(boots) > 0 {
		t.Errorf("the guest booted again on the target: %v", boots)
	}
	sd, err := src.l.FinalizeMigration(ctxFor(t, stepTimeout))
	if err != nil || sd.State != launcher.StateShutoff || sd.Reason != launcher.ReasonMigrated {
		t.Errorf("finalize: %s %v", sd, err)
	}
}

// The source's node agent holds a certificate from another CA: node-b's
// proxy refuses it, nothing reaches the target, the migration fails and
// the source keeps the guest (Running, same QEMU, ticks going on).
func TestMigrationForeignCA(t *testing.T) {
	a := newNode(t, newCA(t), "node-a")
	b := newNode(t, newCA(t), "node-b")
	src := newGuest(t, idleVMI, startSource)
	src.wait(t, testguest.IsKind("tick"))
	pid := src.l.Domain().PID
	var at launcher.MigrationTarget
	dst := newGuest(t, idleVMI, startTarget(&at))
	paths := proxied(t, a, b, src, at)

	err := src.l.Migrate(ctxFor(t, stepTimeout), via(paths), launcher.MigrationOptions{})
	d := src.l.Domain()
	if err == nil {
		d = waitDomain(t, src.l, "the source back", func(d launcher.Domain) bool { return d.State != launcher.StateMigrating })
	}
	if d.State != launcher.StateRunning || d.Reason != launcher.ReasonMigrationFailed || d.PID != pid {
		t.Fatalf("source after a refused proxy connection: %s (pid %d, was %d; migrate: %v) %+v", d, d.PID, pid, err, d.Migration)
	}
	t.Logf("source: %s (migrate: %v)", d, err)
	src.waitAfter(t, len(src.w.Markers()), testguest.IsKind("tick"))
	// The target still waits for its first byte: no stream, no switchover.
	td := dst.l.Domain()
	if td.State == launcher.StateRunning || td.State == launcher.StateShutoff || td.Migration == nil || td.Migration.Status != qmp.MigrationStatusSetup {
		t.Errorf("target after a refused connection: %s %+v", td, td.Migration)
	}
	if info, err := dst.l.Monitor().QueryMigrate(ctxFor(t, stepTimeout)); err != nil || info.Status != "" || info.RAM != nil {
		// QEMU 7.2 reports no incoming status before its first connection.
		t.Errorf("the target received migration data: %+v %v", info, err)
	}
}
