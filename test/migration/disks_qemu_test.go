//go:build qemu

package migration

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/kemu-dev/kemu/launcher"
	"github.com/kemu-dev/kemu/qmp"
	"github.com/kemu-dev/kemu/test/testguest"
)

const (
	// diskproofScratchSerial is idleVMI's emptyDisk serial.
	diskproofScratchSerial = "scratch-1"
	// diskproofBefore: blocks written before Migrate; diskproofAfter:
	// blocks written on the target only before the writer is stopped.
	diskproofBefore = 3
	diskproofAfter  = 5
	// diskproofBandwidth slows the RAM transfer so that the guest's writes
	// overlap it. Measured here (TCG, loopback, both proxies): without a
	// limit the idle guest moves in ~1.2 s (~110 MB of RAM sent), 4 rounds
	// of writes overlap it; at 16 MiB/s ~6.4 s and ~26 rounds.
	diskproofBandwidth = 16 << 20
)

// A guest writes deterministic blocks to its containerDisk overlay and
// its emptyDisk before Migrate, while the disks are mirrored and the RAM
// moves (through both node agents' proxies), and on the target after the
// switchover. On the host, after both QEMUs ended: the target's disk files
// hold every block the guest wrote, and nothing else changed; the
// source's hold a prefix of them, every block its console reported and
// none of the blocks written after the switchover.
func TestMigrationGuestWritesDisks(t *testing.T) {
	ca := newCA(t)
	a, b := newNode(t, ca, "node-a"), newNode(t, ca, "node-b")
	src := newGuest(t, idleVMI, startSource)
	src.wait(t, testguest.IsKind("ready"))
	rootDev, scratchDev := diskproofDevices(t, src.w, diskproofScratchSerial)
	var at launcher.MigrationTarget
	dst := newGuest(t, idleVMI, startTarget(&at))
	paths := proxied(t, a, b, src, at)

	art, err := testguest.Paths()
	if err != nil {
		t.Fatal(err)
	}
	links := filepath.Join(filepath.Dir(src.cfg.Dir), "diskproof")
	if err := os.Mkdir(links, 0o700); err != nil {
		t.Fatal(err)
	}
	zeros := make([]byte, diskproofRange)
	disks := []*diskproofDisk{
		{name: "root", dev: rootDev, original: diskproofRead(t, art.Disk, "qcow2")},
		{name: "scratch", dev: scratchDev, original: zeros},
	}
	if !bytes.Equal(disks[0].original, zeros) {
		t.Fatalf("%s holds data at %d..%d: the writer's range must be free space", art.Disk, diskproofBase, diskproofBase+diskproofRange)
	}
	var pairs []string
	for _, d := range disks {
		d.source = diskproofLink(t, src.l, d.name, links, "source-"+d.name+".qcow2")
		d.target = diskproofLink(t, dst.l, d.name, links, "target-"+d.name+".qcow2")
		pairs = append(pairs, d.dev+":"+d.name)
	}

	diskproofStartWriter(t, src, pairs...)
	diskproofWaitBlock(t, src, diskproofBefore-1)
	atMigrate := len(src.w.Markers())
	t0 := time.Now()
	if err := src.l.Migrate(ctxFor(t, stepTimeout), via(paths),
		launcher.MigrationOptions{Bandwidth: diskproofBandwidth}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	ram := waitDomain(t, src.l, "the RAM moving", func(d launcher.Domain) bool {
		return d.Migration != nil && d.Migration.Status != qmp.MigrationStatusSetup
	})
	atRAM, tRAM := len(src.w.Markers()), time.Since(t0)
	d := waitDomain(t, src.l, "the source's completion", ended(qmp.MigrationStatusCompleted, qmp.MigrationStatusFailed, qmp.MigrationStatusCancelled))
	m := d.Migration
	if m.Status != qmp.MigrationStatusCompleted || d.State != launcher.StateMigrating {
		t.Fatalf("source after the migration: %s %+v (RAM started: %+v)", d, m, ram.Migration)
	}
	td := waitDomain(t, dst.l, "the target running", launcher.InState(launcher.StateRunning, launcher.StateShutoff))
	if td.State != launcher.StateRunning || td.Reason != launcher.ReasonMigrated {
		t.Fatalf("target: %s", td)
	}

	// The writer goes on on the target; then it stops, the guest syncs and
	// powers off (QEMU ends cleanly), and the source ends.
	// The first block the target's console reports may have been written
	// on the source (its dd ended there, its marker was printed here): wait
	// for diskproofAfter blocks after it, all written on the target only.
	first := diskproofBlockNumber(t, dst, diskproofWaitBlock(t, dst, 0))
	diskproofWaitBlock(t, dst, first+diskproofAfter)
	diskproofGuestRun(t, dst, "touch "+diskproofDir+"/stop")
	done := dst.wait(t, testguest.IsKind(diskproofKind, "status", "done"))
	n64, err := done.Int("blocks")
	if err != nil {
		t.Fatal(err)
	}
	n := int(n64)
	diskproofGuestRun(t, dst, "sync")
	if sd, err := dst.l.Shutdown(ctxFor(t, migrationTimeout), time.Minute); err != nil || sd.State != launcher.StateShutoff {
		t.Fatalf("target shutdown: %s %v", sd, err)
	}
	if p := dst.w.Find(testguest.IsKind("poweroff")); len(p) != 1 {
		t.Errorf("the target's guest did not power off itself (sync; poweroff -f): %v", p)
	}
	if sd, err := src.l.FinalizeMigration(ctxFor(t, stepTimeout)); err != nil || sd.State != launcher.StateShutoff || sd.Reason != launcher.ReasonMigrated {
		t.Fatalf("finalize: %s %v", sd, err)
	}

	// What each console reported. Markers are classified by when the host
	// saw them (the console pump lags the guest by a few milliseconds).
	sm := src.w.Markers()
	beforeB := diskproofWritten(t, src, sm[:atMigrate])
	mirrorB := diskproofWritten(t, src, sm[atMigrate:atRAM])
	ramB := diskproofWritten(t, src, sm[atRAM:])
	onSource := slices.Concat(beforeB, mirrorB, ramB)
	onTarget := diskproofWritten(t, dst, dst.w.Markers())
	t.Logf("blocks written (4 KiB to each disk, one every ~%ss): %d before Migrate, %d while the disks were mirrored (%s), %d while the RAM moved (until the source's completion and its console's last line), %d on the target after the switchover; %d in all",
		diskproofPace, len(beforeB), len(mirrorB), tRAM.Round(time.Millisecond), len(ramB), len(onTarget), n)
	t.Logf("migration at %d MiB/s: total %s, downtime %s, setup %s, RAM %d/%d bytes, %d passes, disks %d bytes (%d copied before the RAM)",
		diskproofBandwidth>>20, m.Total, m.Downtime, m.Setup, m.BytesTransferred, m.BytesTotal, m.Passes, m.DiskBytesTotal, m.DiskBytesCopied)
	// A marker the guest was writing at the switchover may be lost
	// between the two consoles: the target's may start one block later.
	k := len(onSource)
	if !diskproofContiguous(onSource, 0) || len(onTarget) == 0 || !diskproofContiguous(onTarget, onTarget[0]) ||
		onTarget[0] < k || onTarget[0] > k+1 || onTarget[len(onTarget)-1] != n-1 {
		t.Fatalf("the consoles' blocks are not 0..%d: source %v, target %v", n-1, onSource, onTarget)
	}
	if len(beforeB) < diskproofBefore || len(ramB) == 0 || len(onTarget) < diskproofAfter+1 {
		t.Errorf("the writes do not span the migration: %d before, %d while mirroring, %d while the RAM moved, %d after", len(beforeB), len(mirrorB), len(ramB), len(onTarget))
	}

	for _, d := range disks {
		ok := diskproofCompare(t, "target "+d.name, d.name, diskproofRead(t, d.target, "qcow2"), d.original, n)
		got := diskproofRead(t, d.source, "qcow2")
		s := diskproofPrefix(d.name, got)
		ok = diskproofCompare(t, "source "+d.name, d.name, got, d.original, s) && ok
		// The source holds every block its console reported and, of the
		// blocks the target's console reported, at most the first (its dd
		// ended on the source, its marker was printed on the target).
		if s < k || s > onTarget[0]+1 {
			t.Errorf("source %s holds blocks 0..%d; the source's console reported 0..%d, the target's %d..%d", d.name, s-1, k-1, onTarget[0], n-1)
		}
		if n-s < diskproofAfter {
			t.Errorf("source %s holds blocks 0..%d of 0..%d: fewer than %d written on the target only", d.name, s-1, n-1, diskproofAfter)
		}
		if ok {
			t.Logf("%s: the target holds blocks 0..%d, the source 0..%d: %d written after the switchover are on the target only", d.name, n-1, s-1, n-s)
		}
	}
}

// diskproofContiguous: blocks is from, from+1, … in order.
func diskproofContiguous(blocks []int, from int) bool {
	for i, b := range blocks {
		if b != from+i {
			return false
		}
	}
	return true
}
