package metrics

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/launcher/rpc"
)

// Defaults of Config.
const (
	// DefaultTTL is how long a launcher's figures serve scrapes: shorter
	// than any sane scrape interval, long enough for several Prometheus
	// replicas scraping at once to share one RPC per launcher.
	DefaultTTL = 5 * time.Second
	// DefaultTimeout bounds one launcher's GetStats (a stuck QEMU monitor
	// costs its VMI's figures, never the scrape).
	DefaultTimeout = 2 * time.Second
	// DefaultParallel is how many launchers are asked at once.
	DefaultParallel = 8
)

// Config is a Collector's configuration.
type Config struct {
	// Node is the node label's value.
	Node string
	// Targets lists the VMIs with a current launcher on this node.
	Targets func() []Target
	// TTL, Timeout, Parallel: zero means the default.
	TTL      time.Duration
	Timeout  time.Duration
	Parallel int
	// Now is the clock (tests); nil: time.Now.
	Now func() time.Time
}

// Collector is the node's VMI metrics (a prometheus.Collector).
type Collector struct {
	cfg Config

	// mu serializes collections: a scrape arriving while another fetches
	// waits and reads the same answers.
	mu     sync.Mutex
	cache  map[string]fetched // by VMI UID
	errors float64            // failed GetStats calls, ever
}

// fetched is one launcher's answer and when it was asked.
type fetched struct {
	client StatsClient
	stats  *rpc.StatsResponse // nil: the call failed
	at     time.Time
}

// New returns a Collector; register it with a prometheus.Registerer.
func New(cfg Config) (*Collector, error) {
	if cfg.Node == "" || cfg.Targets == nil {
		return nil, errors.New("metrics: Node and Targets are required")
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = DefaultParallel
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Collector{cfg: cfg, cache: map[string]fetched{}}, nil
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

// Collect implements prometheus.Collector: the current targets, each with
// its cached or fresh figures.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	targets := c.cfg.Targets()
	c.refresh(targets)
	for _, t := range targets {
		emit(ch, c.cfg.Node, t, c.cache[t.UID].stats)
	}
	ch <- prometheus.MustNewConstMetric(statsErrorsDesc, prometheus.CounterValue, c.errors)
}

// refresh asks the launchers whose figures are missing or older than the
// TTL (or whose client changed: a new launcher Pod), Parallel at a time,
// and forgets the VMIs no longer listed. Called with mu held.
func (c *Collector) refresh(targets []Target) {
	now := c.cfg.Now()
	listed := make(map[string]bool, len(targets))
	var stale []Target
	for _, t := range targets {
		listed[t.UID] = true
		f, ok := c.cache[t.UID]
		if !ok || f.client != t.Client || now.Sub(f.at) >= c.cfg.TTL {
			stale = append(stale, t)
		}
	}
	for uid := range c.cache {
		if !listed[uid] {
			delete(c.cache, uid)
		}
	}
	results := make([]fetched, len(stale))
	sem := make(chan struct{}, c.cfg.Parallel)
	var wg sync.WaitGroup
	for i, t := range stale {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			results[i] = fetched{client: t.Client, stats: c.fetch(t), at: now}
		}()
	}
	wg.Wait()
	for i, t := range stale {
		if results[i].stats == nil {
			c.errors++
		}
		c.cache[t.UID] = results[i]
	}
}

// fetch is one GetStats within the timeout (nil: it failed).
func (c *Collector) fetch(t Target) *rpc.StatsResponse {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
	defer cancel()
	s, err := t.Client.GetStats(ctx, &rpc.Empty{})
	if err != nil {
		klog.V(2).InfoS("VMI metrics: GetStats failed", "vmi", klog.KRef(t.Namespace, t.Name), "err", err)
		return nil
	}
	return s
}
