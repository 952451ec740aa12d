//go:build cluster

package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kemu-dev/kemu/test/cluster"
)

// idleSettle is how long a cluster idles after its last Node is Ready
// before its memory is read: the kubelets' first sync loops, the
// controller-manager's informers and the first node heartbeats are done.
const idleSettle = 10 * time.Second

// controlPlane are the cluster processes that are not a node's (etcd and
// kube-apiserver carry a "-<attempt>" suffix after a port collision).
var controlPlane = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// BenchmarkNodes measures what a cluster with nodes costs: a control plane
// with 1 node and with 2 nodes (each in its own namespaces with its own
// containerd and kubelet) started from warm binaries (the Kubernetes
// binaries built, hack/images's Go build warm: the benchmark runs it once
// first), its idle memory and its stop:
//
//   - s-startup: Cluster.StartupDuration, the control plane and every Node
//     Ready (the node-lock wait not counted); s-nodes: its part from building
//     the node images to the last Node Ready (NodeStartupDuration);
//   - MiB-RSS-total, -control-plane, -per-node: the resident memory of the
//     cluster's processes idleSettle after the last Node was Ready; the
//     control plane is etcd, kube-apiserver, kube-controller-manager and
//     kube-scheduler, a node is its "<node>/…" processes (the namespace
//     holder, containerd, the kubelet; no Pods run), per node is their sum
//     over the node count;
//   - s-stop: Cluster.Stop, after which nothing may be left (Leftovers).
//
// ns/op is reported as s-startup + s-stop, one cluster's start and stop:
// the loop's own time would also count the node-lock wait (another test
// process's cluster) and the idle settle. Each run is logged too, for the
// spread. The package's shared control plane (TestMain, no nodes) idles
// beside it.
//
//	go test -tags cluster -run '^$' -bench BenchmarkNodes -benchtime 3x -timeout 20m ./test/cluster/
func BenchmarkNodes(b *testing.B) {
	warmImages(b)
	for _, nodes := range []int{1, 2} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			var sum nodesSample
			runs := 0
			for b.Loop() {
				s := measureNodes(b, nodes)
				b.Logf("run %d: %s", runs+1, s)
				sum.add(s)
				runs++
			}
			avg := sum.div(runs)
			b.ReportMetric(float64((avg.startup + avg.stop).Nanoseconds()), "ns/op")
			b.ReportMetric(avg.startup.Seconds(), "s-startup")
			b.ReportMetric(avg.nodes.Seconds(), "s-nodes")
			b.ReportMetric(avg.stop.Seconds(), "s-stop")
			b.ReportMetric(avg.rssTotal, "MiB-RSS-total")
			b.ReportMetric(avg.rssControlPlane, "MiB-RSS-control-plane")
			b.ReportMetric(avg.rssPerNode, "MiB-RSS-per-node")
		})
	}
}

// nodesSample is one cluster's figures (durations, MiB).
type nodesSample struct {
	startup, nodes, stop, lockWait        time.Duration
	rssTotal, rssControlPlane, rssPerNode float64
	rssByProcess                          map[string]int64
	nodeStartups                          []time.Duration
}

func (s nodesSample) String() string {
	names := make([]string, 0, len(s.rssByProcess))
	for n := range s.rssByProcess {
		names = append(names, n)
	}
	sort.Strings(names)
	var procs []string
	for _, n := range names {
		procs = append(procs, fmt.Sprintf("%s %.1f", n, mibOf(s.rssByProcess[n])))
	}
	return fmt.Sprintf("startup %s (nodes %s: %v; lock wait %s), stop %s; RSS MiB total %.1f, control plane %.1f, per node %.1f (%s)",
		s.startup.Round(time.Millisecond), s.nodes.Round(time.Millisecond), s.nodeStartups, s.lockWait.Round(time.Millisecond),
		s.stop.Round(time.Millisecond), s.rssTotal, s.rssControlPlane, s.rssPerNode, strings.Join(procs, ", "))
}

func (s *nodesSample) add(o nodesSample) {
	s.startup += o.startup
	s.nodes += o.nodes
	s.stop += o.stop
	s.rssTotal += o.rssTotal
	s.rssControlPlane += o.rssControlPlane
	s.rssPerNode += o.rssPerNode
}

func (s nodesSample) div(n int) nodesSample {
	if n == 0 {
		return s
	}
	d := time.Duration(n)
	f := float64(n)
	return nodesSample{startup: s.startup / d, nodes: s.nodes / d, stop: s.stop / d,
		rssTotal: s.rssTotal / f, rssControlPlane: s.rssControlPlane / f, rssPerNode: s.rssPerNode / f}
}

func mibOf(bytes int64) float64 { return float64(bytes) / (1 << 20) }

// measureNodes starts a cluster with nodes, lets it idle, reads its memory
// and stops it.
func measureNodes(b *testing.B, nodes int) nodesSample {
	c, err := cluster.Start(context.Background(), cluster.Options{Nodes: nodes})
	if err != nil {
		b.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			c.Stop()
		}
	}()
	ready := time.Now()
	s := nodesSample{startup: c.StartupDuration, nodes: c.NodeStartupDuration, lockWait: c.NodeLockWait}
	for _, n := range c.Nodes {
		s.nodeStartups = append(s.nodeStartups, n.StartupDuration.Round(time.Millisecond))
	}
	if len(c.Nodes) != nodes {
		b.Fatalf("%d nodes started, want %d", len(c.Nodes), nodes)
	}

	// Idle until idleSettle has passed since Ready; a process that exits
	// meanwhile fails the run.
	ctx, cancel := context.WithTimeout(context.Background(), idleSettle+time.Minute)
	defer cancel()
	if err := cluster.Poll(ctx, func() error {
		for _, p := range c.Processes() {
			if p.Exited {
				return cluster.StopPolling{Err: fmt.Errorf("%s exited while the cluster idled:\n%s", p.Name, c.Logs(p.Name, 20))}
			}
		}
		if time.Since(ready) < idleSettle {
			return errors.New("settling")
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}

	s.rssByProcess = c.RSS()
	var total, cp, perNode int64
	for name, rss := range s.rssByProcess {
		total += rss
		switch {
		case isControlPlane(name):
			cp += rss
		case isNodeProcess(c, name):
			perNode += rss
		default:
			b.Fatalf("process %q is neither the control plane's nor a node's", name)
		}
	}
	s.rssTotal, s.rssControlPlane, s.rssPerNode = mibOf(total), mibOf(cp), mibOf(perNode)/float64(nodes)

	t0 := time.Now()
	dir := c.Dir
	stopped = true
	if err := c.Stop(); err != nil {
		b.Fatalf("stop: %v", err)
	}
	s.stop = time.Since(t0)
	if left := cluster.Leftovers(dir, ""); len(left) > 0 {
		b.Fatalf("left after Stop: %v", left)
	}
	return s
}

// isControlPlane: name is one of controlPlane, with or without an
// attempt suffix ("etcd-2").
func isControlPlane(name string) bool {
	if i := strings.LastIndexByte(name, '-'); i > 0 {
		if _, err := strconv.Atoi(name[i+1:]); err == nil {
			name = name[:i]
		}
	}
	return slices.Contains(controlPlane, name)
}

func isNodeProcess(c *cluster.Cluster, name string) bool {
	for _, n := range c.Nodes {
		if strings.HasPrefix(name, n.Name+"/") {
			return true
		}
	}
	return false
}

// warmImages runs hack/images once as Start does (go run ./hack/images),
// so that every cluster's node image build starts from a warm Go build
// cache, go run's cached executable included.
func warmImages(b *testing.B) {
	root, err := cluster.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command("go", "run", "./hack/images", "-out", b.TempDir())
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("go run ./hack/images: %v\n%s", err, out)
	}
}
