package metrics

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"

	"github.com/kemu-dev/kemu/launcher/rpc"
)

// fakeLauncher answers GetStats with its vCPU time; hang makes it wait for
// the call's deadline; with gate, each call counts itself in active (and
// the most seen in maxSeen) and waits for a token from gate.
type fakeLauncher struct {
	calls   atomic.Int32
	cpu     int64
	hang    bool
	active  *atomic.Int32
	maxSeen *atomic.Int32
	gate    chan struct{}
}

func (f *fakeLauncher) GetStats(ctx context.Context, _ *rpc.Empty, _ ...grpc.CallOption) (*rpc.StatsResponse, error) {
	f.calls.Add(1)
	if f.active != nil {
		n := f.active.Add(1)
		defer f.active.Add(-1)
		for m := f.maxSeen.Load(); n > m && !f.maxSeen.CompareAndSwap(m, n); m = f.maxSeen.Load() {
		}
		<-f.gate
	}
	if f.hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &rpc.StatsResponse{Vcpus: []*rpc.VCPU{{Index: 0, CpuTimeNanos: f.cpu}}}, nil
}

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }
func target(name string, c StatsClient) Target {
	return Target{Namespace: "ns", Name: name, UID: "uid-" + name, Client: c, Info: Info{Phase: "Running"}}
}

// targetsVar is a settable target list.
type targetsVar struct {
	mu sync.Mutex
	ts []Target
}

func (v *targetsVar) get() []Target {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]Target(nil), v.ts...)
}
func (v *targetsVar) set(ts ...Target) { v.mu.Lock(); v.ts = ts; v.mu.Unlock() }

func newCollector(t *testing.T, v *targetsVar, clk *clock, timeout time.Duration, parallel int) *Collector {
	t.Helper()
	c, err := New(Config{Node: "node-1", Targets: v.get, TTL: 5 * time.Second, Timeout: timeout, Parallel: parallel, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func vcpuSeries(names ...string) string {
	var b strings.Builder
	b.WriteString("# HELP kemu_vmi_vcpu_seconds_total CPU time used by each vCPU thread.\n# TYPE kemu_vmi_vcpu_seconds_total counter\n")
	for _, n := range names {
		b.WriteString(n + "\n")
	}
	return b.String()
}

// Scrapes within the TTL share one GetStats per launcher; after it, each
// launcher is asked again; a VMI no longer listed has no series and no
// cache entry; a new launcher (client) for a VMI is asked at once.
func TestCollectorCache(t *testing.T) {
	a, b := &fakeLauncher{cpu: 1e9}, &fakeLauncher{cpu: 2e9}
	v := &targetsVar{}
	v.set(target("a", a), target("b", b))
	clk := &clock{t: time.Unix(1000, 0)}
	c := newCollector(t, v, clk, time.Second, 2)

	for i := 0; i < 3; i++ {
		if n := testutil.CollectAndCount(c, "kemu_vmi_vcpu_seconds_total"); n != 2 {
			t.Fatalf("scrape %d: %d vCPU series, want 2", i, n)
		}
		clk.add(time.Second)
	}
	if a.calls.Load() != 1 || b.calls.Load() != 1 {
		t.Fatalf("3 scrapes within the TTL: %d and %d calls, want 1 each", a.calls.Load(), b.calls.Load())
	}
	clk.add(3 * time.Second) // 6 s after the first
	a.cpu = 3e9
	want := vcpuSeries(`kemu_vmi_vcpu_seconds_total{id="0",name="a",namespace="ns",node="node-1"} 3`,
		`kemu_vmi_vcpu_seconds_total{id="0",name="b",namespace="ns",node="node-1"} 2`)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "kemu_vmi_vcpu_seconds_total"); err != nil {
		t.Fatal(err)
	}
	if a.calls.Load() != 2 || b.calls.Load() != 2 {
		t.Fatalf("after the TTL: %d and %d calls, want 2 each", a.calls.Load(), b.calls.Load())
	}

	// b's VMI is gone: its series go with it.
	v.set(target("a", a))
	want = vcpuSeries(`kemu_vmi_vcpu_seconds_total{id="0",name="a",namespace="ns",node="node-1"} 3`)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "kemu_vmi_vcpu_seconds_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c, "kemu_vmi_info"); n != 1 {
		t.Errorf("%d info series after b left, want 1", n)
	}
	c.mu.Lock()
	if _, ok := c.cache["uid-b"]; ok {
		t.Error("b's figures still cached after it left")
	}
	c.mu.Unlock()

	// a's VMI got a new launcher: asked within the TTL.
	a2 := &fakeLauncher{cpu: 5e8}
	v.set(target("a", a2))
	want = vcpuSeries(`kemu_vmi_vcpu_seconds_total{id="0",name="a",namespace="ns",node="node-1"} 0.5`)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "kemu_vmi_vcpu_seconds_total"); err != nil {
		t.Fatal(err)
	}
}

// A launcher that does not answer costs its own figures only, within the
// timeout, and is counted; it is asked again only after the TTL.
func TestCollectorTimeout(t *testing.T) {
	stuck, ok := &fakeLauncher{hang: true}, &fakeLauncher{cpu: 1e9}
	v := &targetsVar{}
	v.set(target("stuck", stuck), target("ok", ok))
	clk := &clock{t: time.Unix(1000, 0)}
	c := newCollector(t, v, clk, 100*time.Millisecond, 2)

	start := time.Now()
	want := vcpuSeries(`kemu_vmi_vcpu_seconds_total{id="0",name="ok",namespace="ns",node="node-1"} 1`)
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "kemu_vmi_vcpu_seconds_total"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("a scrape with a stuck launcher took %s", d)
	}
	if n := testutil.CollectAndCount(c, "kemu_vmi_info"); n != 2 {
		t.Errorf("%d info series, want 2 (the stuck VMI keeps its info)", n)
	}
	errs := `# HELP kemu_nodeagent_vmi_stats_errors_total GetStats calls to launchers for the VMI metrics that failed or timed out.
# TYPE kemu_nodeagent_vmi_stats_errors_total counter
kemu_nodeagent_vmi_stats_errors_total 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(errs), "kemu_nodeagent_vmi_stats_errors_total"); err != nil {
		t.Fatal(err)
	}
	if stuck.calls.Load() != 1 {
		t.Errorf("the stuck launcher was asked %d times within the TTL, want 1", stuck.calls.Load())
	}
}

// At most Parallel launchers are asked at once, and all are asked.
func TestCollectorParallel(t *testing.T) {
	var active, maxSeen atomic.Int32
	gate := make(chan struct{})
	v := &targetsVar{}
	var all []*fakeLauncher
	var ts []Target
	for _, n := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		f := &fakeLauncher{active: &active, maxSeen: &maxSeen, gate: gate}
		all = append(all, f)
		ts = append(ts, target(n, f))
	}
	v.set(ts...)
	c := newCollector(t, v, &clock{t: time.Unix(1000, 0)}, time.Minute, 3)
	count := make(chan int, 1)
	go func() { count <- testutil.CollectAndCount(c, "kemu_vmi_vcpu_seconds_total") }()
	// Let the calls end one at a time, each once as many as may run do.
	for left := len(all); left > 0; left-- {
		want := int32(min(3, left))
		deadline := time.Now().Add(30 * time.Second)
		for active.Load() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%d calls under way, want %d (%d left)", active.Load(), want, left)
			}
			time.Sleep(time.Millisecond)
		}
		gate <- struct{}{}
	}
	if n := <-count; n != len(all) {
		t.Fatalf("%d vCPU series, want %d", n, len(all))
	}
	if m := maxSeen.Load(); m != 3 {
		t.Errorf("%d calls at once, want 3 (Parallel 3)", m)
	}
	for i, f := range all {
		if f.calls.Load() != 1 {
			t.Errorf("launcher %d asked %d times, want 1", i, f.calls.Load())
		}
	}
}

// Concurrent scrapes (several Prometheus replicas) share the answers.
func TestCollectorConcurrentScrapes(t *testing.T) {
	f := &fakeLauncher{cpu: 1e9}
	v := &targetsVar{}
	v.set(target("a", f))
	c := newCollector(t, v, &clock{t: time.Unix(1000, 0)}, time.Second, 2)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := reg.Gather(); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if f.calls.Load() != 1 {
		t.Errorf("8 concurrent scrapes made %d calls, want 1", f.calls.Load())
	}
}

func TestNewNeedsNodeAndTargets(t *testing.T) {
	for _, cfg := range []Config{{}, {Node: "n"}, {Targets: func() []Target { return nil }}} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}
