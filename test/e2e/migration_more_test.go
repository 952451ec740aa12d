//go:build cluster && qemu

package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/test/cluster"
)

// finalMigration waits until the VMI's newest migration is final and
// returns it.
func (ev *env) finalMigration(ctx context.Context, t testing.TB, vmi string, timeout time.Duration) *v1.VirtualMachineInstanceMigration {
	t.Helper()
	var last *v1.VirtualMachineInstanceMigration
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := poll(pctx, 200*time.Millisecond, func() error {
		l, err := ev.kemu.KemuV1alpha1().VirtualMachineInstanceMigrations(ns).List(pctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		last = nil
		for i := range l.Items {
			m := &l.Items[i]
			if m.Spec.VMIName == vmi && (last == nil || m.CreationTimestamp.After(last.CreationTimestamp.Time) ||
				m.CreationTimestamp.Equal(&last.CreationTimestamp) && m.Name > last.Name) {
				last = m
			}
		}
		if last == nil || !last.Status.Phase.IsFinal() {
			return fmt.Errorf("the migration of %s is not final: %+v", vmi, last)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return last
}

// TestMigrationCancelWhileTransferring: kemuctl migrate-cancel while the
// guest's memory moves (the suite caps migrations at 16 MiB/s): the
// source's node agent aborts, the VMI keeps running on its node in the
// same QEMU, migrationState says aborted, the target Pod goes.
func TestMigrationCancelWhileTransferring(t *testing.T) {
	ev := need(t)
	dumpOnFailure(t, ev)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const name = "mig-cancel"
	t.Cleanup(func() { ev.c.Kubectl("-n", ns, "delete", "vmi", name, "--ignore-not-found", "--timeout=3m") }) //nolint:errcheck // best effort
	ev.apply(t, vmiManifest(vmiOptions{name: name, labels: map[string]string{"kemu-e2e": name}}))
	vmi := ev.waitRunning(ctx, t, name, bootTimeout)
	ev.waitCondition(ctx, t, name, v1.VirtualMachineInstanceIsMigratable, corev1.ConditionTrue, bootTimeout)
	pid := qemuPid(ctx, t, name)

	ev.run(ctx, t, "migrate", name, "-n", ns)
	pctx, pcancel := context.WithTimeout(ctx, 3*time.Minute)
	err := poll(pctx, 20*time.Millisecond, func() error {
		l, err := ev.kemu.KemuV1alpha1().VirtualMachineInstanceMigrations(ns).List(pctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, m := range l.Items {
			if m.Spec.VMIName == name && m.Status.Phase == v1.MigrationRunning {
				return nil
			}
			if m.Spec.VMIName == name && m.Status.Phase.IsFinal() {
				return fmt.Errorf("the migration ended %s before it ran: too fast to cancel", m.Status.Phase)
			}
		}
		return fmt.Errorf("no running migration yet")
	})
	pcancel()
	if err != nil {
		t.Fatal(err)
	}
	out := ev.run(ctx, t, "migrate-cancel", name, "-n", ns)
	t.Logf("kemuctl migrate-cancel:\n%s", out)
	if !strings.Contains(out, "canceled; VMI "+ns+"/"+name+" runs on node "+vmi.Status.NodeName) {
		t.Errorf("kemuctl migrate-cancel's output: %q", out)
	}
	got, err := ev.getVMI(ctx, name)
	if err != nil || got == nil {
		t.Fatal(err)
	}
	st := got.Status.MigrationState
	if got.Status.Phase != v1.Running || got.Status.NodeName != vmi.Status.NodeName || got.Status.LauncherPod != vmi.Status.LauncherPod ||
		st == nil || !st.Failed || st.Completed || st.AbortStatus != v1.MigrationAbortSucceeded {
		t.Fatalf("VMI after the cancel: phase %s on %s (Pod %s), migrationState %+v", got.Status.Phase, got.Status.NodeName, got.Status.LauncherPod, st)
	}
	if p := qemuPids(name); len(p) != 1 || p[0] != pid {
		t.Errorf("QEMU processes %v after the cancel, want only %d", p, pid)
	}
	t.Logf("canceled while transferring (%v of %v bytes): Running on %s, QEMU %d", stat(st, true), stat(st, false), got.Status.NodeName, pid)
	ev.kubectl(t, "-n", ns, "delete", "vmi", name, "--timeout=3m")
	ev.waitPodsGone(ctx, t, "kemu-e2e="+name)
}

func stat(st *v1.VirtualMachineInstanceMigrationState, processed bool) int64 {
	if st == nil || st.Statistics == nil {
		return 0
	}
	if processed {
		return st.Statistics.DataProcessedBytes
	}
	return st.Statistics.DataTotalBytes
}

// diskUserData writes 1 MiB of random data to the emptyDisk (found by its
// serial) and to the containerDisk at 40 MiB (past the FAT partition's
// files, on the VM's own overlay), and then, every second, reads both
// back with O_DIRECT (from the disk, not the page cache) and prints their
// checksums on the console (a user-data script's own output goes to a
// file in the guest).
const diskUserData = `#!/bin/sh
for d in /sys/block/vd*; do [ "$(cat $d/serial 2>/dev/null)" = scratch-e2e ] && scratch=/dev/${d##*/}; done
dd if=/dev/urandom of=/tmp/data bs=1M count=1 2>/dev/null
dd if=/tmp/data of=$scratch bs=1M count=1 oflag=direct conv=fsync 2>/dev/null
dd if=/tmp/data of=/dev/vda bs=1M count=1 seek=40 oflag=direct conv=fsync 2>/dev/null
echo "KEMU-E2E wrote sha=$(sha256sum </tmp/data | cut -c1-16) disk=$scratch" >/dev/console
while :; do
  e=$(dd if=$scratch bs=1M count=1 iflag=direct 2>/dev/null | sha256sum | cut -c1-16)
  c=$(dd if=/dev/vda bs=1M count=1 skip=40 iflag=direct 2>/dev/null | sha256sum | cut -c1-16)
  echo "KEMU-E2E read empty=$e container=$c" >/dev/console
  sleep 1
done
`

var (
	wroteRE = regexp.MustCompile(`KEMU-E2E wrote sha=([0-9a-f]{16})`)
	readRE  = regexp.MustCompile(`KEMU-E2E read empty=([0-9a-f]{16}) container=([0-9a-f]{16})`)
)

// TestMigrationDiskData: a VMI whose guest wrote to its emptyDisk and its
// containerDisk (the copied, node-local disks) migrates; on the target the
// guest reads both back from the disk and finds what it wrote.
func TestMigrationDiskData(t *testing.T) {
	ev := need(t)
	dumpOnFailure(t, ev)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const name = "mig-disks"
	t.Cleanup(func() { ev.c.Kubectl("-n", ns, "delete", "vmi", name, "--ignore-not-found", "--timeout=3m") }) //nolint:errcheck // best effort
	ev.apply(t, vmiManifest(vmiOptions{name: name, labels: map[string]string{"kemu-e2e": name}, userData: diskUserData, emptyDisk: "scratch-e2e"}))
	vmi := ev.waitRunning(ctx, t, name, bootTimeout)
	ev.waitCondition(ctx, t, name, v1.VirtualMachineInstanceIsMigratable, corev1.ConditionTrue, bootTimeout)
	con := ev.startConsole(t, name)
	if err := con.waitFor(ctx, "KEMU-E2E read", bootTimeout); err != nil {
		t.Fatal(err)
	}
	m := wroteRE.FindStringSubmatch(con.out.String())
	if m == nil {
		t.Fatalf("the guest did not say what it wrote:\n%s", tail(con.out.String(), 2000))
	}
	want := m[1]
	if r := readRE.FindStringSubmatch(con.out.String()); r == nil || r[1] != want || r[2] != want {
		t.Fatalf("on the source the guest reads %v, wrote %s", r, want)
	}
	ev.run(ctx, t, "migrate", name, "-n", ns, "--wait", "--timeout", migrationTimeout.String())
	got, err := ev.getVMI(ctx, name)
	if err != nil || got == nil || got.Status.NodeName == vmi.Status.NodeName {
		t.Fatalf("VMI after the migration: %+v %v", got, err)
	}
	con.stop()
	con = ev.startConsole(t, name)
	if err := con.waitFor(ctx, "KEMU-E2E read", time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, r := range readRE.FindAllStringSubmatch(con.out.String(), -1) {
		if r[1] != want || r[2] != want {
			t.Errorf("on the target the guest reads emptyDisk %s, containerDisk %s; it wrote %s", r[1], r[2], want)
		}
	}
	t.Logf("the guest's writes (sha %s) on both disks read back on %s", want, got.Status.NodeName)
	ev.kubectl(t, "-n", ns, "delete", "vmi", name, "--timeout=3m")
	ev.waitPodsGone(ctx, t, "kemu-e2e="+name)
}

// TestMigrationTargetNodeDown: the node a migration would go to is down
// (kubelet, containerd, node agent stopped): the target Pod never runs,
// the migration fails after the suite's 45 s target timeout, and the VMI
// keeps running where it was in the same QEMU.
func TestMigrationTargetNodeDown(t *testing.T) {
	ev := need(t)
	dumpOnFailure(t, ev)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	const name = "mig-nodedown"
	t.Cleanup(func() { ev.c.Kubectl("-n", ns, "delete", "vmi", name, "--ignore-not-found", "--timeout=3m") }) //nolint:errcheck // best effort
	ctrl, err := ev.kube.CoreV1().Pods(kemuNS).List(ctx, metav1.ListOptions{LabelSelector: controllerSelector})
	if err != nil || len(ctrl.Items) != 1 {
		t.Fatalf("controller Pods: %v %v", err, ctrl)
	}
	// The VMI runs on the controller's node a; b goes down.
	var a, b *cluster.Node
	for _, n := range ev.c.Nodes[:2] {
		if n.Name == ctrl.Items[0].Spec.NodeName {
			a = n
		} else {
			b = n
		}
	}
	if a == nil {
		t.Fatalf("the controller runs on %q, none of the first two nodes", ctrl.Items[0].Spec.NodeName)
	}
	ev.kubectl(t, "cordon", b.Name)
	ev.apply(t, vmiManifest(vmiOptions{name: name, labels: map[string]string{"kemu-e2e": name}}))
	vmi := ev.waitRunning(ctx, t, name, bootTimeout)
	ev.kubectl(t, "uncordon", b.Name)
	if vmi.Status.NodeName != a.Name {
		t.Fatalf("VMI on %s, want %s", vmi.Status.NodeName, a.Name)
	}
	ev.waitCondition(ctx, t, name, v1.VirtualMachineInstanceIsMigratable, corev1.ConditionTrue, bootTimeout)
	pid := qemuPid(ctx, t, name)

	// kemu-api (the migrate subresource, the webhooks) must outlive b.
	ev.kemuAPIElsewhere(ctx, t, b.Name)
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	started := false
	defer func() {
		if !started {
			if err := b.Start(context.Background()); err != nil {
				t.Errorf("starting %s again: %v", b.Name, err)
			}
		}
	}()
	if err := ev.kemuAPIEndpointsOff(ctx, b.Name); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	ev.run(ctx, t, "migrate", name, "-n", ns)
	m := ev.finalMigration(ctx, t, name, 5*time.Minute)
	if m.Status.Phase != v1.MigrationFailed {
		t.Fatalf("migration to a node that is down: %s", m.Status.Phase)
	}
	t.Logf("migration %s Failed %s after its create: %+v", m.Name, time.Since(t0).Round(time.Second), m.Status.Conditions)
	got, err := ev.getVMI(ctx, name)
	if err != nil || got == nil || got.Status.Phase != v1.Running || got.Status.NodeName != a.Name || got.Status.LauncherPod != vmi.Status.LauncherPod {
		t.Fatalf("VMI after the failed migration: %+v %v", got, err)
	}
	if p := qemuPids(name); len(p) != 1 || p[0] != pid {
		t.Errorf("QEMU processes %v, want only %d", p, pid)
	}

	started = true
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	bctx, bcancel := context.WithTimeout(ctx, 3*time.Minute)
	defer bcancel()
	if err := ev.waitSchedulable(bctx, b.Name, "true"); err != nil {
		t.Fatal(err)
	}
	ev.kubectl(t, "-n", ns, "delete", "vmi", name, "--timeout=3m")
	ev.waitPodsGone(ctx, t, "kemu-e2e="+name)
}

// TestMigrationParallelLimit: with parallelMigrationsPerCluster 1 (the
// suite's kemu-config), three migrations created at once run one after
// the other — never two target Pods at a time — and all succeed.
func TestMigrationParallelLimit(t *testing.T) {
	ev := need(t)
	dumpOnFailure(t, ev)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	sel := "kemu-e2e=mig-limit"
	labels := map[string]string{"kemu-e2e": "mig-limit"}
	t.Cleanup(func() { ev.c.Kubectl("-n", ns, "delete", "vmi", "-l", sel, "--ignore-not-found", "--timeout=3m") }) //nolint:errcheck // best effort
	names := []string{"mig-limit-1", "mig-limit-2", "mig-limit-3"}
	for _, n := range names {
		ev.apply(t, vmiManifest(vmiOptions{name: n, labels: labels, noNetwork: true}))
	}
	for _, n := range names {
		ev.waitRunning(ctx, t, n, bootTimeout)
		ev.waitCondition(ctx, t, n, v1.VirtualMachineInstanceIsMigratable, corev1.ConditionTrue, bootTimeout)
	}
	for _, n := range names {
		if _, err := ev.kemu.KemuV1alpha1().VirtualMachineInstanceMigrations(ns).Create(ctx, &v1.VirtualMachineInstanceMigration{
			ObjectMeta: metav1.ObjectMeta{GenerateName: n + "-", Namespace: ns},
			Spec:       v1.VirtualMachineInstanceMigrationSpec{VMIName: n},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	most, t0 := 0, time.Now()
	pctx, pcancel := context.WithTimeout(ctx, 10*time.Minute)
	defer pcancel()
	err := poll(pctx, 50*time.Millisecond, func() error {
		pods, err := ev.kube.CoreV1().Pods(ns).List(pctx, metav1.ListOptions{LabelSelector: sel + "," + launcherpod.MigrationUIDLabel})
		if err != nil {
			return err
		}
		targets := 0
		for _, p := range pods.Items {
			// A target Pod that is not yet the VMI's launcher (before
			// its handoff) and has not ended.
			vmi, _ := ev.getVMI(pctx, p.Labels[launcherpod.VMINameLabel])
			if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed && vmi != nil && vmi.Status.LauncherPod != p.Name {
				targets++
			}
		}
		most = max(most, targets)
		l, err := ev.kemu.KemuV1alpha1().VirtualMachineInstanceMigrations(ns).List(pctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		done := 0
		for _, m := range l.Items {
			if strings.HasPrefix(m.Name, "mig-limit-") && m.Status.Phase.IsFinal() {
				if m.Status.Phase != v1.MigrationSucceeded {
					t.Errorf("migration %s: %s %+v", m.Name, m.Status.Phase, m.Status.Conditions)
				}
				done++
			}
		}
		if done < len(names) {
			return fmt.Errorf("%d of %d migrations final", done, len(names))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if most > 1 {
		t.Errorf("%d migration target Pods at once with parallelMigrationsPerCluster 1", most)
	}
	t.Logf("three migrations, at most %d target Pod at a time, all done in %s", most, time.Since(t0).Round(time.Second))
	ev.kubectl(t, "-n", ns, "delete", "vmi", "-l", sel, "--timeout=3m")
	ev.waitPodsGone(ctx, t, sel)
}
