//go:build cluster && qemu

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// BenchmarkCreateToRunning measures VMI create → Running on this node: one
// VMI alone, then a burst of 10 created at once (the test guest, 128Mi,
// containerDisk, masquerade; TCG). Per VMI it takes the time from the create
// call to the watch event showing Running (client side, ms resolution) and
// reports p50, p95 and max; the server's figure (creationTimestamp → the
// Running entry of phaseTransitionTimestamps, 1 s resolution) is logged too.
//
//	go test -tags 'cluster qemu' -run '^$' -bench CreateToRunning -benchtime 1x ./test/e2e/
func BenchmarkCreateToRunning(b *testing.B) {
	for _, n := range []int{1, 10} {
		b.Run(fmt.Sprintf("vmis=%d", n), func(b *testing.B) {
			ev := need(b)
			dumpOnFailure(b, ev)
			var client, server []time.Duration
			for i := 0; i < b.N; i++ {
				c, s := createToRunning(b, ev, n, i)
				client, server = append(client, c...), append(server, s...)
			}
			b.StopTimer()
			p50, p95, pmax := percentiles(client)
			b.ReportMetric(p50.Seconds(), "p50-s")
			b.ReportMetric(p95.Seconds(), "p95-s")
			b.ReportMetric(pmax.Seconds(), "max-s")
			s50, s95, smax := percentiles(server)
			b.Logf("%d VMIs at once (%d runs): create → Running p50 %s p95 %s max %s (server timestamps: p50 %s p95 %s max %s)",
				n, b.N, p50.Round(10*time.Millisecond), p95.Round(10*time.Millisecond), pmax.Round(10*time.Millisecond), s50, s95, smax)
		})
	}
}

// createToRunning creates n VMIs at once, waits until all are Running and
// deletes them again (outside the timer).
func createToRunning(b *testing.B, ev *env, n, run int) (client, server []time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	sel := fmt.Sprintf("kemu-e2e=bench-%d-%d", n, run)
	b.Cleanup(func() { ev.c.Kubectl("-n", ns, "delete", "vmi", "-l", sel, "--ignore-not-found", "--timeout=5m") }) //nolint:errcheck // best effort
	var vmis []*v1.VirtualMachineInstance
	for i := range n {
		vmi := &v1.VirtualMachineInstance{}
		m := vmiManifest(vmiOptions{name: fmt.Sprintf("bench-%d-%d-%d", n, run, i), labels: map[string]string{"kemu-e2e": strings.TrimPrefix(sel, "kemu-e2e=")}})
		if err := yaml.UnmarshalStrict([]byte(m), vmi); err != nil {
			b.Fatal(err)
		}
		vmis = append(vmis, vmi)
	}
	pw := ev.watchPhases(ctx, b, sel)
	b.StartTimer()
	created := map[string]time.Time{}
	for _, vmi := range vmis {
		created[vmi.Name] = time.Now()
		if _, err := ev.kemu.KemuV1alpha1().VirtualMachineInstances(ns).Create(ctx, vmi, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	running := map[string]time.Time{}
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Minute)
	defer wcancel()
	_, err := pw.waitFor(wctx, func(e phaseEvent) bool {
		if e.phase.IsFinal() {
			b.Errorf("VMI %s ended %s before Running", e.name, e.phase)
			return true
		}
		if _, ok := running[e.name]; !ok && e.phase == v1.Running {
			running[e.name] = e.at
		}
		return len(running) == n
	})
	b.StopTimer()
	if err != nil || b.Failed() {
		b.Fatalf("waiting for %d VMIs Running: %v", n, err)
	}
	for name, at := range running {
		client = append(client, at.Sub(created[name]))
	}
	list, err := ev.kemu.KemuV1alpha1().VirtualMachineInstances(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		b.Fatal(err)
	}
	for _, vmi := range list.Items {
		for _, pt := range vmi.Status.PhaseTransitionTimestamps {
			if pt.Phase == v1.Running {
				server = append(server, pt.PhaseTransitionTimestamp.Sub(vmi.CreationTimestamp.Time))
			}
		}
	}
	ev.kubectl(b, "-n", ns, "delete", "vmi", "-l", sel, "--timeout=5m")
	ev.waitPodsGone(ctx, b, sel)
	return client, server
}

// percentiles: nearest-rank p50, p95 and the maximum.
func percentiles(d []time.Duration) (p50, p95, pmax time.Duration) {
	if len(d) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	rank := func(p float64) time.Duration {
		i := int(p*float64(len(s))+0.999999) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return rank(0.50), rank(0.95), s[len(s)-1]
}
