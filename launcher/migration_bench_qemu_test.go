//go:build qemu

package launcher

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kemu-dev/kemu/qmp"
	"github.com/kemu-dev/kemu/test/testguest"
)

// dirtyingVMI is the kernel-boot test guest with a user-data script that
// overwrites RATE MiB of non-zero data per second over a SIZE MiB region
// of its RAM (/run is in the initramfs), and says so on the console.
const dirtyingVMI = `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: migd}
spec:
  domain:
    memory: {guest: 256Mi}
    firmware:
      kernelBoot:
        kernelArgs: console=ttyS0 quiet kemu.dhcp=0
        container: {image: "oci:_out/testguest/oci/kernelboot", kernelPath: /boot/vmlinuz, initrdPath: /boot/initrd.img}
    devices:
      autoattachPodInterface: false
      disks: [{name: ci, disk: {bus: virtio}}]
  volumes:
  - name: ci
    cloudInitNoCloud:
      userData: |
        #!/bin/sh
        dd if=/dev/urandom of=/run/src bs=1M count=1 2>/dev/null
        echo "KEMU-GUEST dirty status=started rate=RATE size=SIZE" >/dev/console
        i=0
        while :; do
          j=0
          while [ $j -lt RATE ]; do
            dd if=/run/src of=/run/dirty bs=1M count=1 seek=$(( (i + j) % SIZE )) conv=notrunc 2>/dev/null
            j=$((j + 1))
          done
          i=$((i + RATE))
          sleep 1
        done
`

// dirtyingGuest returns dirtyingVMI writing rate MiB/s over size MiB.
func dirtyingGuest(rate, size int) string {
	return strings.NewReplacer("RATE", fmt.Sprint(rate), "SIZE", fmt.Sprint(size)).Replace(dirtyingVMI)
}

// Dirtying migration: the guest writes dirtyRate MiB/s, more than the
// bandwidth moves, with a tight downtime limit: pre-copy alone cannot
// converge; auto-converge throttles the vCPU until it does.
const (
	dirtyRate     = 24 // MiB/s
	dirtySize     = 48 // MiB
	dirtyDowntime = 20 * time.Millisecond
	dirtyBW       = 16 << 20 // bytes/s
	// dirtyTimeout is CompletionTimeoutPerGiB: the guest's 256 MiB count as
	// one GiB, so it is the whole migration's limit.
	dirtyTimeout = 60 * time.Second
)

func dirtyOptions(autoConverge bool) MigrationOptions {
	return MigrationOptions{Bandwidth: dirtyBW, DowntimeLimit: dirtyDowntime,
		CompletionTimeoutPerGiB: dirtyTimeout, AllowAutoConverge: autoConverge}
}

// migrationRun is one launcher migration's outcome.
type migrationRun struct {
	total    time.Duration // Migrate → the target Running (or the source back)
	pause    time.Duration // source STOP → target RESUME (QMP timestamps); 0 if none
	m        Migration     // the source's final figures
	source   Domain        // the source's domain at the end
	complete bool
}

// launcherMigration boots yaml's guest in a source launcher (waiting for
// marker), migrates it to a new target launcher through path, and ends
// both: FinalizeMigration after a completed migration, Kill otherwise.
func launcherMigration(tb testing.TB, yaml string, marker testguest.Predicate, path migrationPath, opts MigrationOptions) migrationRun {
	tb.Helper()
	src := start(tb, newConfig(tb, parseVMI(tb, yaml)))
	src.wait(bootTimeout, marker)
	dst := startTarget(tb, yaml)
	defer func() { _, _ = dst.l.Kill(context.Background()) }()
	stop := src.l.Monitor().Subscribe(qmp.WithFilter(qmp.AnyOf("STOP")), qmp.WithBuffer(16))
	defer stop.Close()
	resume := dst.l.Monitor().Subscribe(qmp.WithFilter(qmp.AnyOf("RESUME")), qmp.WithBuffer(16))
	defer resume.Close()
	to := path(tb, dst.at)
	t0 := time.Now()
	if err := src.l.Migrate(ctxFor(tb, stepTimeout), to, opts); err != nil {
		tb.Fatalf("migrate: %v", err)
	}
	d := waitDomain(tb, src.l, "the source's outcome", migrationStatus(qmp.MigrationStatusCompleted, qmp.MigrationStatusFailed, qmp.MigrationStatusCancelled))
	run := migrationRun{m: *d.Migration, complete: d.Migration.Status == qmp.MigrationStatusCompleted}
	if !run.complete {
		d = waitDomain(tb, src.l, "the source back", func(d Domain) bool { return d.State != StateMigrating })
		run.total, run.source = time.Since(t0), d
		return run
	}
	td := waitDomain(tb, dst.l, "the target running", InState(StateRunning, StateShutoff))
	run.total = time.Since(t0)
	if td.State != StateRunning {
		tb.Fatalf("target after the migration: %s", td)
	}
	run.pause = pauseWindow(tb, stop, resume)
	sd, err := src.l.FinalizeMigration(ctxFor(tb, stepTimeout))
	if err != nil {
		tb.Fatalf("finalize: %s %v", sd, err)
	}
	run.source = sd
	return run
}

// BenchmarkMigration: run with -benchtime 5x (medians are reported).
//
// idle: the idle 256 MiB kernel-boot test guest (no disk to copy) moves
// between two launchers over unix sockets (source start → migrate →
// finalize); in the same loop two plain QEMUs with the same argv and
// capabilities, started by the benchmark, migrate directly. ms-total is
// Migrate until the target runs, ms-downtime QEMU's downtime on the
// source (vCPU stop → end of stream, the wait at pre-switchover
// included), ms-pause the guest's pause from the source's STOP to the
// target's RESUME; the direct- metrics are the plain QEMUs'.
//
// idle-proxies: the same, the launchers' migration going through two node
// agents' migration proxies on loopback (node-a's unix listener → TLS 1.3
// with node certificates from one CA → node-b's listener → the target's
// socket); the plain QEMUs migrate directly in the same loop, and
// x-proxy-over-direct is the ratio of the medians of ms-total.
//
// dirtying: a guest writing 24 MiB/s with 16 MiB/s of bandwidth and a
// 20 ms downtime limit, without and with auto-converge (completed = the
// share of runs that completed within the 60 s completion timeout), and
// with post-copy after 5 s of pre-copy (into the launcher's target, with
// vm.unprivileged_userfaultfd=1 for the run).
func BenchmarkMigration(b *testing.B) {
	b.Run("idle", func(b *testing.B) { benchIdleMigration(b, directPath, "x-launcher-over-direct") })
	b.Run("idle-proxies", func(b *testing.B) { benchIdleMigration(b, newBenchProxies(b).path, "x-proxy-over-direct") })
	for _, ac := range []bool{false, true} {
		b.Run(fmt.Sprintf("dirtying/auto-converge=%t", ac), func(b *testing.B) { benchDirtyingMigration(b, dirtyOptions(ac)) })
	}
	b.Run("dirtying/post-copy", func(b *testing.B) {
		allowUserfaultfd(b)
		o := dirtyOptions(false)
		o.AllowPostCopy, o.CompletionTimeoutPerGiB = true, postCopyAfter
		benchDirtyingMigration(b, o)
	})
}

// postCopyAfter is the dirtying post-copy benchmark's completion timeout:
// pre-copy for that long, then post-copy.
const postCopyAfter = 5 * time.Second

// benchIdleMigration migrates the idle guest between launchers through
// path and between plain QEMUs directly in the same loop; ratio names the
// metric of their median totals' ratio.
func benchIdleMigration(b *testing.B, path migrationPath, ratio string) {
	argv, runDir := launcherArgv(b, kbootMigrationVMI)
	var totals, downtimes, pauses, plainTotals, plainDowntimes []time.Duration
	for b.Loop() {
		r := launcherMigration(b, kbootMigrationVMI, testguest.IsKind("ready"), path, MigrationOptions{})
		if !r.complete {
			b.Fatalf("migration did not complete: %+v", r.m)
		}
		totals, downtimes, pauses = append(totals, r.total), append(downtimes, r.m.Downtime), append(pauses, r.pause)

		src := startPlain(b, argv, runDir, false)
		if err := src.mon.Cont(ctxFor(b, stepTimeout)); err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
		_, err := src.w.Wait(ctx, testguest.IsKind("ready"))
		cancel()
		if err != nil {
			b.Fatalf("plain source boot: %v", err)
		}
		dst := startPlain(b, argv, runDir, true)
		total, downtime := plainMigrate(b, src, dst, MigrationOptions{})
		plainTotals, plainDowntimes = append(plainTotals, total), append(plainDowntimes, downtime)
		src.kill()
		dst.kill()
	}
	b.ReportMetric(ms(median(totals)), "ms-total")
	b.ReportMetric(ms(median(downtimes)), "ms-downtime")
	b.ReportMetric(ms(median(pauses)), "ms-pause")
	b.ReportMetric(ms(median(plainTotals)), "ms-direct-total")
	b.ReportMetric(ms(median(plainDowntimes)), "ms-direct-downtime")
	b.ReportMetric(float64(median(totals))/float64(median(plainTotals)), ratio)
}

func benchDirtyingMigration(b *testing.B, opts MigrationOptions) {
	yaml := dirtyingGuest(dirtyRate, dirtySize)
	var totals, downtimes []time.Duration
	var completed, runs, passes float64
	for b.Loop() {
		r := launcherMigration(b, yaml, testguest.IsKind("dirty"), directPath, opts)
		runs++
		passes += float64(r.m.Passes)
		if r.complete {
			completed++
			downtimes = append(downtimes, r.m.Downtime)
		}
		totals = append(totals, r.total)
		if r.source.State != StateShutoff && r.source.State != StateRunning {
			b.Fatalf("source after the migration: %s", r.source)
		}
	}
	b.ReportMetric(completed/runs, "completed")
	b.ReportMetric(ms(median(totals)), "ms-total")
	if len(downtimes) > 0 {
		b.ReportMetric(ms(median(downtimes)), "ms-downtime")
	}
	b.ReportMetric(passes/runs, "passes")
}
