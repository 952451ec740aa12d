//go:build cluster && qemu

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// migrationTimeout bounds kemuctl migrate --wait: a target Pod's start
// (containerDisk copy, QEMU) and an idle guest's RAM under TCG.
const migrationTimeout = 5 * time.Minute

// tickRE reads the test guest's tick counter off the console.
var tickRE = regexp.MustCompile(`KEMU-GUEST tick n=(\d+)`)

// lastTick is the highest tick counter in out (0: none).
func lastTick(out string) int {
	n := 0
	for _, m := range tickRE.FindAllStringSubmatch(out, -1) {
		if v, _ := strconv.Atoi(m[1]); v > n {
			n = v
		}
	}
	return n
}

// httpGet fetches url once.
func httpGet(url string) (string, error) {
	hc := &http.Client{Timeout: 2 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return strings.TrimSpace(string(b)), nil
}

// TestLiveMigration: `kemuctl migrate --wait` moves a running VMI
// (containerDisk, masquerade on the pod network) from its node to the
// other one and back: the guest's tick counter goes on (no boot), its
// httpd answers at the new Pod IP, status.nodeName follows, the source
// Pod ends, and the VMI never leaves Running.
func TestLiveMigration(t *testing.T) {
	ev := need(t)
	dumpOnFailure(t, ev)
	if len(ev.c.Nodes) < 2 {
		t.Fatalf("live migration needs two nodes, the cluster has %d", len(ev.c.Nodes))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	const name = "migrating"
	sel := "kemu-e2e=" + name
	t.Cleanup(func() { ev.c.Kubectl("-n", ns, "delete", "vmi", name, "--ignore-not-found", "--timeout=3m") }) //nolint:errcheck // best effort
	phases := ev.watchPhases(ctx, t, sel)
	ev.apply(t, vmiManifest(vmiOptions{name: name, userData: webUserData, ports: []int{8080}, labels: map[string]string{"kemu-e2e": name}}))
	vmi := ev.waitRunning(ctx, t, name, bootTimeout)
	ev.waitCondition(ctx, t, name, v1.VirtualMachineInstanceIsMigratable, corev1.ConditionTrue, bootTimeout)
	con := ev.startConsole(t, name)
	if err := con.waitFor(ctx, "KEMU-GUEST tick", bootTimeout); err != nil {
		t.Fatal(err)
	}

	for round := 1; round <= 2; round++ {
		from, fromPod := vmi.Status.NodeName, vmi.Status.LauncherPod
		before := lastTick(con.out.String())
		out := ev.run(ctx, t, "migrate", name, "-n", ns, "--wait", "--timeout", migrationTimeout.String())
		done := time.Now()
		t.Logf("round %d: kemuctl migrate:\n%s", round, out)
		got, err := ev.getVMI(ctx, name)
		if err != nil || got == nil {
			t.Fatalf("VMI after the migration: %v", err)
		}
		vmi = got
		if vmi.Status.NodeName == from || ev.c.Node(vmi.Status.NodeName) == nil || vmi.Status.LauncherPod == fromPod {
			t.Fatalf("round %d: VMI on node %s, Pod %s after migrating from %s (%s)", round, vmi.Status.NodeName, vmi.Status.LauncherPod, from, fromPod)
		}
		if !strings.Contains(out, "migrated to node "+vmi.Status.NodeName) {
			t.Errorf("kemuctl migrate's output names no node %s", vmi.Status.NodeName)
		}
		st := vmi.Status.MigrationState
		if st == nil || !st.Completed || st.Failed || st.SourceNode != from || st.TargetNode != vmi.Status.NodeName || st.Statistics == nil {
			t.Errorf("round %d: migrationState %+v", round, st)
		}

		// The guest's httpd at the new Pod IP, right away.
		pod, err := ev.kube.CoreV1().Pods(ns).Get(ctx, vmi.Status.LauncherPod, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		url := fmt.Sprintf("http://%s:8080/index.html", pod.Status.PodIP)
		var body string
		pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
		err = poll(pctx, 100*time.Millisecond, func() (err error) { body, err = httpGet(url); return err })
		pcancel()
		if err != nil || body != "kemu-e2e-hello" {
			t.Fatalf("round %d: GET %s after the migration: %q %v", round, url, body, err)
		}
		t.Logf("round %d: %s → %s: GET %s answered %s after Succeeded", round, from, vmi.Status.NodeName, url, time.Since(done).Round(time.Millisecond))

		// The guest went on: its console (the old one followed the
		// source Pod and ended with it) shows ticks beyond the last one
		// before, and no new boot.
		con.stop()
		con = ev.startConsole(t, name)
		if err := con.waitFor(ctx, "KEMU-GUEST tick", time.Minute); err != nil {
			t.Fatal(err)
		}
		if after := lastTick(con.out.String()); after <= before {
			t.Errorf("round %d: tick %d on the target after tick %d on the source: the guest restarted", round, after, before)
		}
		if strings.Contains(con.out.String(), "KEMU-GUEST boot") {
			t.Errorf("round %d: the guest booted again on the target", round)
		}

		// The source Pod ended (its launcher quit after the handoff).
		pctx, pcancel = context.WithTimeout(ctx, 2*time.Minute)
		err = poll(pctx, 500*time.Millisecond, func() error {
			p, err := ev.kube.CoreV1().Pods(ns).Get(pctx, fromPod, metav1.GetOptions{})
			if err != nil {
				return nil // gone
			}
			if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				return nil
			}
			return fmt.Errorf("source Pod %s is %s", fromPod, p.Status.Phase)
		})
		pcancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	running := false
	for _, e := range phases.snapshot() {
		if e.name != name {
			continue
		}
		if running && e.phase != v1.Running {
			t.Errorf("the VMI left Running during the migrations: %s", phases.summary())
			break
		}
		running = running || e.phase == v1.Running
	}
	ev.kubectl(t, "-n", ns, "delete", "vmi", name, "--timeout=3m")
	ev.waitPodsGone(ctx, t, sel)
}

// TestMigrationFailures: what must not move a VMI, or must leave it where
// it ran: a bridge binding on the pod network is not live-migratable and
// its migration is refused at once; a target Pod deleted before the
// handoff fails the migration and the VMI keeps running on its node in
// the same QEMU; so does a migration canceled with kemuctl migrate-cancel.
func TestMigrationFailures(t *testing.T) {
	ev := need(t)
	dumpOnFailure(t, ev)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	sel := "kemu-e2e=migration-failures"
	labels := map[string]string{"kemu-e2e": "migration-failures"}
	t.Cleanup(func() { ev.c.Kubectl("-n", ns, "delete", "vmi", "-l", sel, "--ignore-not-found", "--timeout=3m") }) //nolint:errcheck // best effort
	ev.apply(t, vmiManifest(vmiOptions{name: "mig-bridge", labels: labels, bridge: true}))
	ev.apply(t, vmiManifest(vmiOptions{name: "mig-stays", labels: labels}))
	ev.waitRunning(ctx, t, "mig-bridge", bootTimeout)
	ev.waitCondition(ctx, t, "mig-bridge", v1.VirtualMachineInstanceIsMigratable, corev1.ConditionFalse, bootTimeout)
	if vmi, _ := ev.getVMI(ctx, "mig-bridge"); vmi != nil {
		if c := condition(vmi, v1.VirtualMachineInstanceIsMigratable); c == nil || c.Reason != "InterfaceNotLiveMigratable" {
			t.Errorf("bridge binding: LiveMigratable %+v, want False InterfaceNotLiveMigratable", c)
		}
	}
	cmd := exec.CommandContext(ctx, ev.kemuctl, "migrate", "mig-bridge", "-n", ns, "--wait", "--timeout", "1m", "--kubeconfig", ev.c.Kubeconfig)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "failed") {
		t.Errorf("kemuctl migrate of a bridge-bound VMI: %v\n%s", err, out)
	} else {
		t.Logf("bridge binding refused: %s", lastLines(string(out), 1))
	}

	vmi := ev.waitRunning(ctx, t, "mig-stays", bootTimeout)
	ev.waitCondition(ctx, t, "mig-stays", v1.VirtualMachineInstanceIsMigratable, corev1.ConditionTrue, bootTimeout)
	node, pid := vmi.Status.NodeName, qemuPid(ctx, t, "mig-stays")
	stays := func(what string) {
		t.Helper()
		got, err := ev.getVMI(ctx, "mig-stays")
		if err != nil || got == nil || got.Status.Phase != v1.Running || got.Status.NodeName != node || got.Status.LauncherPod != vmi.Status.LauncherPod {
			t.Fatalf("after %s: VMI %+v %v, want Running on %s in Pod %s", what, got.Status, err, node, vmi.Status.LauncherPod)
		}
		if p := qemuPids("mig-stays"); len(p) != 1 || p[0] != pid {
			t.Errorf("after %s: QEMU processes %v, want only %d", what, p, pid)
		}
	}
	targetPod := func() (*corev1.Pod, error) {
		l, err := ev.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: launcherpod.MigrationUIDLabel})
		if err != nil {
			return nil, err
		}
		for i := range l.Items {
			if l.Items[i].Labels[launcherpod.CreatedByLabel] == string(vmi.UID) && l.Items[i].DeletionTimestamp == nil {
				return &l.Items[i], nil
			}
		}
		return nil, fmt.Errorf("no target Pod yet")
	}
	waitMigration := func(phase v1.VirtualMachineInstanceMigrationPhase) {
		t.Helper()
		pctx, pcancel := context.WithTimeout(ctx, 3*time.Minute)
		defer pcancel()
		err := poll(pctx, 200*time.Millisecond, func() error {
			l, err := ev.kemu.KemuV1alpha1().VirtualMachineInstanceMigrations(ns).List(pctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			for _, m := range l.Items {
				if m.Spec.VMIName == "mig-stays" && !m.Status.Phase.IsFinal() {
					return fmt.Errorf("migration %s is %s", m.Name, m.Status.Phase)
				}
				if m.Spec.VMIName == "mig-stays" && m.Status.Phase != phase {
					return fmt.Errorf("migration %s ended %s, want %s", m.Name, m.Status.Phase, phase)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	// The target Pod deleted as soon as it exists.
	ev.run(ctx, t, "migrate", "mig-stays", "-n", ns)
	var tp *corev1.Pod
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Minute)
	err = poll(pctx, 100*time.Millisecond, func() (err error) { tp, err = targetPod(); return err })
	pcancel()
	if err != nil {
		t.Fatal(err)
	}
	ev.kubectl(t, "-n", ns, "delete", "pod", tp.Name, "--wait=false")
	waitMigration(v1.MigrationFailed)
	stays("the target Pod's deletion")
	t.Logf("target Pod %s deleted: the migration failed, the VMI runs on %s in QEMU %d", tp.Name, node, pid)

	// Canceled before the handoff.
	ev.run(ctx, t, "migrate", "mig-stays", "-n", ns)
	out2 := ev.run(ctx, t, "migrate-cancel", "mig-stays", "-n", ns)
	t.Logf("kemuctl migrate-cancel: %s", strings.TrimSpace(out2))
	pctx, pcancel = context.WithTimeout(ctx, 2*time.Minute)
	err = poll(pctx, 200*time.Millisecond, func() error {
		if p, err := targetPod(); err == nil {
			return fmt.Errorf("target Pod %s still there", p.Name)
		}
		return nil
	})
	pcancel()
	if err != nil {
		t.Fatal(err)
	}
	stays("kemuctl migrate-cancel")
	ev.kubectl(t, "-n", ns, "delete", "vmi", "-l", sel, "--timeout=3m")
	ev.waitPodsGone(ctx, t, sel)
}
