//go:build cluster && qemu

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// startStages are the steps of VMI create → Running, in order, each the
// first moment the benchmark saw it (watch events, ms resolution, on this
// machine's clock, which the node shares), or the launcher's own log line:
//
//	pod-created       the controller created the launcher Pod
//	pod-bound         the scheduler bound it to the node
//	pod-initialized   the kubelet ran the sandbox and every init container
//	launcher-started  the compute container runs (kemu-launcher's exec)
//	launcher-serving  kemu-launcher's command server answers (its log)
//	vm-starting       the node agent's Sync arrived (its log)
//	qemu-started      QEMU was exec'd (its log)
//	vmi-running       the VMI's phase is Running (the node agent's write)
var startStages = []string{"pod-created", "pod-bound", "pod-initialized", "launcher-started",
	"launcher-serving", "vm-starting", "qemu-started", "vmi-running"}

// launcherLogStages are the launcher's log messages of its stages.
var launcherLogStages = map[string]string{
	"kemu-launcher serving": "launcher-serving",
	"Starting the VM":       "vm-starting",
	"QEMU started":          "qemu-started",
}

// BenchmarkCreateToRunning measures VMI create → Running on one node: one
// VMI alone, then a burst of 10 created at once (the test guest, 128Mi,
// containerDisk, masquerade; TCG), each broken down into startStages, and
// in the same run the same bursts of plain Pods on the same node: the
// launcher's image running kemu-launcher with nothing to do (no init
// containers, no volumes), create → Running. It reports p50/p95 of both,
// the difference of the p50s, each stage's p50 (seconds after the create)
// and the API writes per VMI (kube-apiserver's request counters: Pods
// created and updated, VMI updates and status writes — not the user's
// create, the kubelet's Pod status, the binding or events), with 409
// conflicts counted apart.
//
//	go test -tags 'cluster qemu' -run '^$' -bench CreateToRunning -benchtime 1x ./test/e2e/
func BenchmarkCreateToRunning(b *testing.B) {
	for _, n := range []int{1, 10} {
		b.Run(fmt.Sprintf("vmis=%d", n), func(b *testing.B) {
			ev := need(b)
			dumpOnFailure(b, ev)
			node := ev.c.Nodes[0].Name
			var vmi, pod []time.Duration
			stages := map[string][]time.Duration{}
			var writes, conflicts []float64
			for i := 0; i < b.N; i++ {
				r := createToRunning(b, ev, node, n, i)
				vmi = append(vmi, r.running...)
				for k, v := range r.stages {
					stages[k] = append(stages[k], v...)
				}
				writes, conflicts = append(writes, r.writesPerVMI), append(conflicts, r.conflicts)
				pod = append(pod, plainPodsToRunning(b, ev, node, r.image, n, i)...)
			}
			b.StopTimer()
			v50, v95, _ := percentiles(vmi)
			p50, p95, _ := percentiles(pod)
			b.ReportMetric(v50.Seconds(), "p50-s")
			b.ReportMetric(v95.Seconds(), "p95-s")
			b.ReportMetric(p50.Seconds(), "pod-p50-s")
			b.ReportMetric(p95.Seconds(), "pod-p95-s")
			b.ReportMetric((v50 - p50).Seconds(), "vmi-minus-pod-p50-s")
			b.ReportMetric(median(writes), "api-writes-per-vmi")
			b.ReportMetric(median(conflicts), "api-conflicts")
			var table strings.Builder
			fmt.Fprintf(&table, "%d VMIs at once on %s (%d runs), seconds after the create, p50 / p95:\n", n, node, b.N)
			prev := time.Duration(0)
			for _, st := range startStages {
				s50, s95, _ := percentiles(stages[st])
				b.ReportMetric(s50.Seconds(), st+"-p50-s")
				fmt.Fprintf(&table, "  %-17s %6.2f / %6.2f  (+%.2f)\n", st, s50.Seconds(), s95.Seconds(), (s50 - prev).Seconds())
				prev = s50
			}
			fmt.Fprintf(&table, "  plain Pod Running  %6.2f / %6.2f", p50.Seconds(), p95.Seconds())
			b.Log(table.String())
		})
	}
}

// startRun is one burst's figures.
type startRun struct {
	running      []time.Duration            // per VMI, create → Running
	stages       map[string][]time.Duration // per stage, per VMI, create → stage
	writesPerVMI float64
	conflicts    float64
	image        string // the launcher Pods' image
}

// createToRunning creates n VMIs on node at once, follows their launcher
// Pods and phases until all are Running, reads the launchers' logs, and
// deletes them again (outside the timer).
func createToRunning(b *testing.B, ev *env, node string, n, run int) startRun {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	sel := fmt.Sprintf("kemu-e2e=bench-%d-%d", n, run)
	b.Cleanup(func() { ev.c.Kubectl("-n", ns, "delete", "vmi", "-l", sel, "--ignore-not-found", "--timeout=5m") }) //nolint:errcheck // best effort
	var vmis []*v1.VirtualMachineInstance
	for i := range n {
		vmi := &v1.VirtualMachineInstance{}
		m := vmiManifest(vmiOptions{name: fmt.Sprintf("bench-%d-%d-%d", n, run, i), node: node,
			labels: map[string]string{"kemu-e2e": strings.TrimPrefix(sel, "kemu-e2e=")}})
		if err := yaml.UnmarshalStrict([]byte(m), vmi); err != nil {
			b.Fatal(err)
		}
		vmis = append(vmis, vmi)
	}
	seen := newStageClock()
	pods := ev.watchLauncherPods(ctx, b, seen)
	defer pods()
	pw := ev.watchPhases(ctx, b, sel)
	before := ev.apiWrites(b)
	beforeConflicts := ev.apiConflicts(b)
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
	r := startRun{stages: map[string][]time.Duration{}}
	// Writes per VMI: kemu's to Pods and VMIs until the last is Running.
	after := ev.apiWrites(b)
	var w float64
	for _, k := range []string{"pods", "virtualmachineinstances", "virtualmachineinstances/status"} {
		w += after[k] - before[k]
	}
	// The test's own creates are POSTs on virtualmachineinstances.
	w -= float64(n)
	r.writesPerVMI = w / float64(n)
	var per []string
	for _, k := range slices.Sorted(maps.Keys(after)) {
		if d := after[k] - before[k]; d > 0 {
			per = append(per, fmt.Sprintf("%s %.1f", k, d/float64(n)))
		}
	}
	b.Logf("API writes per VMI by resource (the test's create included): %s", strings.Join(per, ", "))
	r.conflicts = ev.apiConflicts(b) - beforeConflicts
	list, err := ev.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: launcherpod.AppLabel + "=" + launcherpod.AppLauncher})
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range list.Items {
		name := p.Labels[launcherpod.VMINameLabel]
		if _, ok := created[name]; !ok {
			continue
		}
		if r.image == "" {
			for _, c := range p.Spec.Containers {
				if c.Name == launcherpod.ComputeContainer {
					r.image = c.Image
				}
			}
		}
		logs, stderr, err := ev.c.Kubectl("-n", ns, "logs", p.Name, "-c", launcherpod.ComputeContainer)
		if err != nil {
			b.Fatalf("logs of %s: %v %s", p.Name, err, stderr)
		}
		for st, at := range launcherLogTimes(logs, created[name]) {
			seen.set(name, st, at)
		}
	}
	for name, t0 := range created {
		seen.set(name, "vmi-running", running[name])
		r.running = append(r.running, running[name].Sub(t0))
		for _, st := range startStages {
			at, ok := seen.get(name, st)
			if !ok {
				b.Fatalf("VMI %s: stage %s not seen", name, st)
			}
			r.stages[st] = append(r.stages[st], at.Sub(t0))
		}
	}
	ev.kubectl(b, "-n", ns, "delete", "vmi", "-l", sel, "--timeout=5m")
	ev.waitPodsGone(ctx, b, sel)
	return r
}

// stageClock keeps, per VMI name, the first time each stage was seen.
type stageClock struct {
	mu sync.Mutex
	at map[string]map[string]time.Time
}

func newStageClock() *stageClock { return &stageClock{at: map[string]map[string]time.Time{}} }

func (c *stageClock) set(vmi, stage string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.at[vmi]
	if m == nil {
		m = map[string]time.Time{}
		c.at[vmi] = m
	}
	if _, ok := m[stage]; !ok {
		m[stage] = at
	}
}

func (c *stageClock) get(vmi, stage string) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.at[vmi][stage]
	return at, ok
}

// watchLauncherPods records the launcher Pods' stages as their watch
// events arrive; the returned func stops it.
func (ev *env) watchLauncherPods(ctx context.Context, b *testing.B, c *stageClock) func() {
	b.Helper()
	ctx, cancel := context.WithCancel(ctx)
	w, err := ev.kube.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: launcherpod.AppLabel + "=" + launcherpod.AppLauncher})
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range w.ResultChan() {
			p, ok := e.Object.(*corev1.Pod)
			if !ok || e.Type == watch.Deleted {
				continue
			}
			now, name := time.Now(), p.Labels[launcherpod.VMINameLabel]
			c.set(name, "pod-created", now)
			if p.Spec.NodeName != "" {
				c.set(name, "pod-bound", now)
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodInitialized && cond.Status == corev1.ConditionTrue {
					c.set(name, "pod-initialized", now)
				}
			}
			for _, cs := range p.Status.ContainerStatuses {
				if cs.Name == launcherpod.ComputeContainer && cs.State.Running != nil {
					c.set(name, "launcher-started", now)
				}
			}
		}
	}()
	return func() { cancel(); w.Stop(); <-done }
}

// klogLine is a klog header: severity, month and day, time of day.
var klogLine = regexp.MustCompile(`^[IWEF](\d{2})(\d{2}) (\d{2}:\d{2}:\d{2}\.\d{6})\s+\d+ \S+\] "([^"]*)"`)

// launcherLogTimes finds the launcher's stages in its log; klog's header
// has no year or zone: the node's clock is this machine's (UTC), the year
// the create's.
func launcherLogTimes(logs string, created time.Time) map[string]time.Time {
	out := map[string]time.Time{}
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := klogLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		st, ok := launcherLogStages[m[4]]
		if !ok {
			continue
		}
		at, err := time.ParseInLocation("2006-01-02 15:04:05.000000",
			fmt.Sprintf("%d-%s-%s %s", created.Year(), m[1], m[2], m[3]), time.Local)
		if err != nil {
			continue
		}
		if _, dup := out[st]; !dup {
			out[st] = at
		}
	}
	return out
}

// plainPodsToRunning creates n Pods of image on node at once — kemu-launcher
// waiting for a Sync that never comes, nothing else — and returns each one's
// create → Running (watch, ms resolution); they are deleted after.
func plainPodsToRunning(b *testing.B, ev *env, node, image string, n, run int) []time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sel := fmt.Sprintf("kemu-e2e-plain=%d-%d", n, run)
	key, val, _ := strings.Cut(sel, "=")
	b.Cleanup(func() { ev.c.Kubectl("-n", ns, "delete", "pod", "-l", sel, "--ignore-not-found", "--timeout=2m") }) //nolint:errcheck // best effort
	w, err := ev.kube.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	created := map[string]time.Time{}
	b.StartTimer()
	for i := range n {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("plain-%d-%d-%d", n, run, i), Labels: map[string]string{key: val}},
			Spec: corev1.PodSpec{
				NodeSelector:                  map[string]string{corev1.LabelHostname: node},
				TerminationGracePeriodSeconds: ptr.To[int64](1),
				Containers: []corev1.Container{{Name: "noop", Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
					Args: []string{"--qemu-timeout=10m", "--sockets-dir=/tmp/s", "--runtime-dir=/tmp/r"}}},
			},
		}
		created[p.Name] = time.Now()
		if _, err := ev.kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	var out []time.Duration
	done := map[string]bool{}
	for len(done) < n {
		select {
		case e, ok := <-w.ResultChan():
			if !ok {
				b.Fatal("plain Pods' watch ended")
			}
			p, isPod := e.Object.(*corev1.Pod)
			if !isPod || done[p.Name] || p.Status.Phase != corev1.PodRunning {
				continue
			}
			done[p.Name] = true
			out = append(out, time.Since(created[p.Name]))
		case <-ctx.Done():
			b.Fatalf("plain Pods: %d of %d Running: %v", len(done), n, ctx.Err())
		}
	}
	b.StopTimer()
	ev.kubectl(b, "-n", ns, "delete", "pod", "-l", sel, "--timeout=2m")
	slices.Sort(out)
	return out
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
