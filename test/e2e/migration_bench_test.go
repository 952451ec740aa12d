//go:build cluster && qemu

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// migrationWriteResources are the API resources a migration writes (its
// VMIM, the VMI's status, the target and source Pods and their status,
// the disruption budget, events); other writers (node heartbeats, leases)
// are left out.
var migrationWriteResources = map[string]bool{
	"virtualmachineinstancemigrations": true, "virtualmachineinstances": true, "pods": true,
	"poddisruptionbudgets": true, "events": true,
}

// apiWrites reads kube-apiserver's apiserver_request_total and sums the
// write requests (POST, PUT, PATCH, DELETE) per resource[/subresource] of
// migrationWriteResources.
func (ev *env) apiWrites(tb testing.TB) map[string]float64 {
	tb.Helper()
	return ev.apiRequests(tb, func(map[string]string) bool { return true })
}

// apiConflicts is how many of those writes were refused with 409 Conflict.
func (ev *env) apiConflicts(tb testing.TB) float64 {
	tb.Helper()
	var n float64
	for _, v := range ev.apiRequests(tb, func(l map[string]string) bool { return l["code"] == "409" }) {
		n += v
	}
	return n
}

// apiRequests sums apiserver_request_total's write requests to
// migrationWriteResources whose labels keep accepts, per
// resource[/subresource].
func (ev *env) apiRequests(tb testing.TB, keep func(labels map[string]string) bool) map[string]float64 {
	tb.Helper()
	out, stderr, err := ev.c.Kubectl("get", "--raw", "/metrics")
	if err != nil {
		tb.Fatalf("kube-apiserver metrics: %v %s", err, stderr)
	}
	sums := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		labels, value, ok := strings.Cut(strings.TrimPrefix(line, "apiserver_request_total{"), "} ")
		if !ok {
			continue
		}
		l := map[string]string{}
		for _, kv := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(kv, "=")
			l[k] = strings.Trim(v, `"`)
		}
		switch l["verb"] {
		case "POST", "PUT", "PATCH", "DELETE", "APPLY":
		default:
			continue
		}
		if !migrationWriteResources[l["resource"]] || !keep(l) {
			continue
		}
		n, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		key := l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		sums[key] += n
	}
	return sums
}

// BenchmarkMigration measures create VirtualMachineInstanceMigration →
// Succeeded for an idle 128Mi test guest (containerDisk, masquerade)
// moving between the two nodes (TCG), and the API writes one migration
// costs (kube-apiserver's request counters, before/after; background
// writers of other resources excluded). It reports the median over
// b.N migrations, back and forth, and QEMU's total and downtime.
//
//	go test -tags 'cluster qemu' -run '^$' -bench BenchmarkMigration -benchtime 5x ./test/e2e/
func BenchmarkMigration(b *testing.B) {
	ev := need(b)
	dumpOnFailure(b, ev)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	const name = "bench-migration"
	sel := "kemu-e2e=" + name
	b.Cleanup(func() { ev.c.Kubectl("-n", ns, "delete", "vmi", name, "--ignore-not-found", "--timeout=3m") }) //nolint:errcheck // best effort
	ev.apply(b, vmiManifest(vmiOptions{name: name, labels: map[string]string{"kemu-e2e": name}}))
	ev.waitRunning(ctx, b, name, bootTimeout)
	ev.waitCondition(ctx, b, name, v1.VirtualMachineInstanceIsMigratable, corev1.ConditionTrue, bootTimeout)

	var took, total, downtime, writes []float64
	perResource := map[string]float64{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		before := ev.apiWrites(b)
		b.StartTimer()
		t0 := time.Now()
		m, err := ev.kemu.KemuV1alpha1().VirtualMachineInstanceMigrations(ns).Create(ctx, &v1.VirtualMachineInstanceMigration{
			ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-", Namespace: ns},
			Spec:       v1.VirtualMachineInstanceMigrationSpec{VMIName: name},
		}, metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		var phase v1.VirtualMachineInstanceMigrationPhase
		pctx, pcancel := context.WithTimeout(ctx, migrationTimeout)
		err = poll(pctx, 20*time.Millisecond, func() error {
			cur, err := ev.kemu.KemuV1alpha1().VirtualMachineInstanceMigrations(ns).Get(pctx, m.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if phase = cur.Status.Phase; phase.IsFinal() {
				return nil
			}
			return fmt.Errorf("migration %s is %s", m.Name, phase)
		})
		pcancel()
		d := time.Since(t0)
		b.StopTimer()
		if err != nil || phase != v1.MigrationSucceeded {
			b.Fatalf("migration %d: %s %v", i, phase, err)
		}
		took = append(took, d.Seconds())
		vmi, err := ev.getVMI(ctx, name)
		if err != nil || vmi == nil || vmi.Status.MigrationState == nil || vmi.Status.MigrationState.Statistics == nil {
			b.Fatalf("VMI after migration %d: %v", i, err)
		}
		s := vmi.Status.MigrationState.Statistics
		total, downtime = append(total, float64(s.TotalMilliseconds)), append(downtime, float64(s.DowntimeMilliseconds))
		// The source's end (Pod Succeeded, its status writes) belongs to
		// the migration: wait for the source Pod to end before counting.
		src := vmi.Status.MigrationState.SourcePod
		pctx, pcancel = context.WithTimeout(ctx, 2*time.Minute)
		_ = poll(pctx, 200*time.Millisecond, func() error {
			p, err := ev.kube.CoreV1().Pods(ns).Get(pctx, src, metav1.GetOptions{})
			if err == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				return fmt.Errorf("source Pod %s is %s", src, p.Status.Phase)
			}
			return nil
		})
		pcancel()
		after := ev.apiWrites(b)
		n := 0.0
		for k, v := range after {
			perResource[k] += v - before[k]
			n += v - before[k]
		}
		writes = append(writes, n)
		b.Logf("migration %d: %s → Succeeded in %s (QEMU total %d ms, downtime %d ms), %v API writes",
			i, vmi.Status.MigrationState.SourceNode, d.Round(time.Millisecond), s.TotalMilliseconds, s.DowntimeMilliseconds, n)
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(median(took), "s-create-to-succeeded")
	b.ReportMetric(median(total), "ms-qemu-total")
	b.ReportMetric(median(downtime), "ms-downtime")
	b.ReportMetric(median(writes), "api-writes")
	keys := make([]string, 0, len(perResource))
	for k := range perResource {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.1f", k, perResource[k]/float64(b.N)))
	}
	b.Logf("API writes per migration by resource: %s", strings.Join(parts, ", "))
	ev.kubectl(b, "-n", ns, "delete", "vmi", name, "--timeout=3m")
	ev.waitPodsGone(ctx, b, sel)
}

// median of v (the lower middle of an even count).
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[(len(s)-1)/2]
}
