//go:build cluster && qemu

package e2e

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/controller/evacuation"
)

// TestDrain: `kubectl drain` of a node with two evictionStrategy
// LiveMigrate VMIs and one None VMI completes by itself: the LiveMigrate
// VMIs are protected by disruption budgets, migrated to the other node
// (their guests go on, no boot) and the None VMI is shut down by the
// eviction of its Pod, as a Pod would be.
func TestDrain(t *testing.T) {
	ev := need(t)
	dumpOnFailure(t, ev)
	if len(ev.c.Nodes) < 2 {
		t.Fatalf("a drain needs two nodes, the cluster has %d", len(ev.c.Nodes))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	a, b := ev.c.Nodes[0].Name, ev.c.Nodes[1].Name
	sel := "kemu-e2e=drain"
	t.Cleanup(func() {
		ev.c.Kubectl("uncordon", a)                                                              //nolint:errcheck // best effort
		ev.c.Kubectl("uncordon", b)                                                              //nolint:errcheck // best effort
		ev.c.Kubectl("-n", ns, "delete", "vmi", "-l", sel, "--ignore-not-found", "--timeout=3m") //nolint:errcheck // best effort
	})
	// Everything starts on a: b is cordoned while the VMIs schedule.
	ev.kubectl(t, "cordon", b)
	labels := map[string]string{"kemu-e2e": "drain"}
	names := []string{"drain-live-1", "drain-live-2", "drain-none"}
	for _, n := range names {
		s := v1.EvictionStrategyLiveMigrate
		if n == "drain-none" {
			s = v1.EvictionStrategyNone
		}
		ev.apply(t, vmiManifest(vmiOptions{name: n, labels: labels, evictionStrategy: string(s), noNetwork: n == "drain-none"}))
	}
	consoles := map[string]*console{}
	for _, n := range names {
		vmi := ev.waitRunning(ctx, t, n, bootTimeout)
		if vmi.Status.NodeName != a {
			t.Fatalf("VMI %s runs on %s, want %s (the other node is cordoned)", n, vmi.Status.NodeName, a)
		}
	}
	ticks := map[string]int{}
	for _, n := range names[:2] {
		ev.waitCondition(ctx, t, n, v1.VirtualMachineInstanceIsMigratable, corev1.ConditionTrue, bootTimeout)
		consoles[n] = ev.startConsole(t, n)
		if err := consoles[n].waitFor(ctx, "KEMU-GUEST tick", bootTimeout); err != nil {
			t.Fatal(err)
		}
	}
	// Each LiveMigrate VMI has its budget; the None VMI none.
	for _, n := range names {
		vmi, err := ev.getVMI(ctx, n)
		if err != nil || vmi == nil {
			t.Fatalf("VMI %s: %v", n, err)
		}
		want := 1
		if n == "drain-none" {
			want = 0
		}
		if got := len(ev.budgets(ctx, t, vmi)); got != want {
			t.Errorf("VMI %s has %d disruption budgets, want %d", n, got, want)
		}
	}
	ev.kubectl(t, "uncordon", b)

	t0 := time.Now()
	for _, n := range names[:2] {
		ticks[n] = lastTick(consoles[n].out.String())
	}
	out, stderr, err := ev.c.Kubectl("drain", a, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=8m")
	if err != nil {
		t.Fatalf("kubectl drain %s: %v\n%s%s", a, err, out, stderr)
	}
	t.Logf("kubectl drain %s completed in %s:\n%s", a, time.Since(t0).Round(time.Millisecond), lastLines(out, 12))

	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, n := range names[:2] {
		vmi, err := ev.getVMI(ctx, n)
		if err != nil || vmi == nil {
			t.Fatalf("VMI %s after the drain: %v", n, err)
		}
		if vmi.Status.Phase != v1.Running || vmi.Status.NodeName != b || vmi.Status.EvacuationNodeName != "" {
			t.Errorf("VMI %s after the drain: %s on %s (evacuationNodeName %q), want Running on %s",
				n, vmi.Status.Phase, vmi.Status.NodeName, vmi.Status.EvacuationNodeName, b)
			continue
		}
		consoles[n].stop()
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := ev.startConsole(t, n)
			err := c.waitFor(ctx, "KEMU-GUEST tick", time.Minute)
			mu.Lock()
			defer mu.Unlock()
			switch after := lastTick(c.out.String()); {
			case err != nil:
				t.Errorf("VMI %s's console on %s: %v", n, b, err)
			case after <= ticks[n] || strings.Contains(c.out.String(), "KEMU-GUEST boot"):
				t.Errorf("VMI %s: tick %d on %s after tick %d on %s: the guest restarted", n, after, b, ticks[n], a)
			}
		}()
	}
	wg.Wait()
	none, err := ev.getVMI(ctx, "drain-none")
	if err != nil || none == nil || !none.Status.Phase.IsFinal() {
		t.Errorf("the None VMI after the drain: %+v %v, want it shut down", none, err)
	} else {
		t.Logf("the None VMI: %s (%s)", none.Status.Phase, none.Status.Reason)
	}
	ev.kubectl(t, "uncordon", a)
	ev.kubectl(t, "-n", ns, "delete", "vmi", "-l", sel, "--timeout=3m")
	ev.waitPodsGone(ctx, t, sel)
}

// budgets are the disruption budgets kemu keeps for vmi.
func (ev *env) budgets(ctx context.Context, t testing.TB, vmi *v1.VirtualMachineInstance) []policyv1.PodDisruptionBudget {
	t.Helper()
	l, err := ev.kube.PolicyV1().PodDisruptionBudgets(ns).List(ctx, metav1.ListOptions{
		LabelSelector: evacuation.BudgetForLabel + "=" + string(vmi.UID)})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
