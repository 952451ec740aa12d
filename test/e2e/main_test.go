//go:build cluster && qemu

package e2e

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	"github.com/kemu-dev/kemu/api/launcherpod"
	"github.com/kemu-dev/kemu/api/subresources"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/test/cluster"
	"github.com/kemu-dev/kemu/test/deploytest"
)

const (
	// kemuNS is where deploy/ installs kemu.
	kemuNS = "kemu-system"
	// ns is where the tests create their VMIs and VMs.
	ns = "default"

	containerDiskImage = "kemu.local/testguest/containerdisk:latest"
	kernelBootImage    = "kemu.local/testguest/kernelboot:latest"

	controllerSelector = "app.kubernetes.io/name=kemu-controller"
	nodeagentSelector  = "app.kubernetes.io/name=kemu-nodeagent"
	launcherSelector   = "kemu.dev/app=launcher"
)

// env is the cluster every test of the package shares (TestMain).
type env struct {
	root      string
	c         *cluster.Cluster
	kube      kubernetes.Interface
	kemu      versioned.Interface
	kemuctl   string // the kemuctl binary built from ./cmd/kemuctl
	overlay   string // the kustomization applied (deploy/ + the tests' settings)
	hostDisks string // the node directory kemu-config hostDiskDirs allows
	setupTook time.Duration
}

var (
	e        *env
	setupErr error
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse() // setup reads -test.bench (benchmarking)
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	e, setupErr = setup(ctx)
	if e != nil && e.c != nil {
		defer func() {
			teardown(e)
			if err := e.c.Stop(); err != nil {
				fmt.Fprintln(os.Stderr, "e2e: stopping the cluster:", err)
			}
			fmt.Fprintf(os.Stderr, "e2e: suite wall time %s (setup %s)\n", time.Since(t0).Round(time.Second), e.setupTook.Round(time.Second))
		}()
	}
	if setupErr != nil {
		fmt.Fprintln(os.Stderr, "e2e: setup failed:", setupErr)
		if e != nil && e.c != nil {
			fmt.Fprintln(os.Stderr, diagnostics(e.c))
		}
	} else {
		e.setupTook = time.Since(t0)
		fmt.Fprintf(os.Stderr, "e2e: cluster with kemu ready in %s\n", e.setupTook.Round(time.Millisecond))
	}
	return m.Run()
}

// need fails the test when the shared setup did not finish.
func need(tb testing.TB) *env {
	tb.Helper()
	if setupErr != nil {
		tb.Fatalf("e2e setup: %v", setupErr)
	}
	return e
}

// missing names what to run to get each artefact.
func checkArtefacts(root string) error {
	var errs []error
	for _, a := range []struct{ path, how string }{
		{"_out/images/" + deploytest.Archive("kemu-api"), "make images"},
		{"_out/images/kemu-launcher.oci.tar", "make images"},
		{"_out/images/kemu-controller.oci.tar", "make images"},
		{"_out/images/kemu-nodeagent.oci.tar", "make images"},
		{"_out/testguest/oci/containerdisk.docker.tar", "make testguest"},
		{"_out/testguest/oci/kernelboot.docker.tar", "make testguest"},
		{deploytest.ThrowawayOverlay + "/kustomization.yaml", "the deploy/ kustomize tree (git checkout)"},
	} {
		if _, err := os.Stat(filepath.Join(root, a.path)); err != nil {
			errs = append(errs, fmt.Errorf("%s is missing (run: %s): %w", a.path, a.how, err))
		}
	}
	return errors.Join(errs...)
}

func setup(ctx context.Context) (*env, error) {
	root, err := cluster.RepoRoot()
	if err != nil {
		return nil, err
	}
	if err := checkArtefacts(root); err != nil {
		return nil, err
	}
	ev := &env{root: root}
	bin, err := os.MkdirTemp("", "kemu-e2e-bin")
	if err != nil {
		return nil, err
	}
	ev.kemuctl = filepath.Join(bin, "kemuctl")
	built := make(chan error, 1)
	go func() {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", ev.kemuctl, "./cmd/kemuctl")
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			err = fmt.Errorf("go build ./cmd/kemuctl: %v\n%s", err, out)
		}
		built <- err
	}()

	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "e2e: "+format+"\n", args...)
	}
	// Two nodes. The node lifecycle controller marks a node whose kubelet
	// stopped NotReady after 20 s (TestNodeFailure). Multus's thin plugin
	// in front of each node's bridge network (every Pod's network goes
	// through it; TestMultusSecondaryNetwork adds a secondary one). The
	// kubelets run the static CPU manager policy and see 2 MiB hugepages
	// (TestPlacement; Burstable and BestEffort Pods run on every CPU as
	// before).
	c, err := cluster.Start(ctx, cluster.Options{Nodes: 2, Multus: true, Logf: logf,
		StaticCPUManager: true, HugePages2Mi: placementHugepages,
		ControllerManagerArgs: []string{"--node-monitor-grace-period=20s"}})
	if err != nil {
		<-built
		return nil, fmt.Errorf("starting the cluster (make k8s builds its binaries): %w", err)
	}
	ev.c = c
	logf("control plane + %d nodes up in %s (waited %s for the node lock)", len(c.Nodes), c.StartupDuration.Round(time.Millisecond), c.NodeLockWait.Round(time.Millisecond))
	// IPv4 forwarding off in the host's network namespace, so that launcher
	// Pods' namespaces start with it off (a new network namespace copies the
	// initial namespace's value, not its creator's: the nodes forward, the
	// host does not need to): the launcher must turn it on in its own
	// namespace although the container's /proc/sys is read-only.
	// test/cluster restores the value on Stop.
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("0\n"), 0o644); err != nil {
		return ev, fmt.Errorf("net.ipv4.ip_forward=0 on the host: %w", err)
	}
	if ev.kube, err = kubernetes.NewForConfig(c.RESTConfig()); err != nil {
		return ev, err
	}
	if ev.kemu, err = versioned.NewForConfig(c.RESTConfig()); err != nil {
		return ev, err
	}
	if err := <-built; err != nil {
		return ev, err
	}

	t0 := time.Now()
	archives := []string{"_out/testguest/oci/containerdisk.docker.tar", "_out/testguest/oci/kernelboot.docker.tar"}
	wantImages := []string{containerDiskImage, kernelBootImage}
	for _, img := range deploytest.Images {
		archives = append(archives, "_out/images/"+deploytest.Archive(img))
		wantImages = append(wantImages, "kemu.local/"+img+":latest")
	}
	for _, a := range archives {
		if err := c.ImportImage(ctx, filepath.Join(root, a)); err != nil {
			return ev, err
		}
	}
	list, _ := c.Ctr(ctx, "images", "ls", "-q")
	for _, want := range wantImages {
		if !strings.Contains(list, want+"\n") {
			return ev, fmt.Errorf("containerd has no %s after the import (run: make images, make testguest):\n%s", want, list)
		}
	}
	logf("%d images imported in %s", len(archives), time.Since(t0).Round(time.Millisecond))

	if err := ev.writeOverlay(); err != nil {
		return ev, err
	}
	t0 = time.Now()
	if _, stderr, err := c.Kubectl("apply", "-k", ev.overlay); err != nil {
		return ev, fmt.Errorf("kubectl apply -k deploy/: %v\n%s", err, stderr)
	}
	err = poll(ctx, 500*time.Millisecond, func() error {
		d, err := ev.kube.AppsV1().Deployments(kemuNS).Get(ctx, "kemu-controller", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range d.Status.Conditions {
			if cond.Type == appsv1.DeploymentAvailable && cond.Status == corev1.ConditionTrue && d.Status.ReadyReplicas == 1 {
				return nil
			}
		}
		return fmt.Errorf("controller Deployment not Available: %+v", d.Status)
	})
	if err != nil {
		return ev, err
	}
	logf("controller Deployment Available %s after apply", time.Since(t0).Round(time.Millisecond))
	if err := ev.waitKemuAPI(ctx); err != nil {
		return ev, err
	}
	logf("kemu-api serves %s and its webhooks answer, %s after apply", subresources.GroupVersion, time.Since(t0).Round(time.Millisecond))
	err = poll(ctx, 500*time.Millisecond, func() error {
		ds, err := ev.kube.AppsV1().DaemonSets(kemuNS).Get(ctx, "kemu-nodeagent", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if s := ds.Status; s.DesiredNumberScheduled != int32(len(c.Nodes)) || s.NumberReady != int32(len(c.Nodes)) {
			return fmt.Errorf("node agent DaemonSet not ready on %d nodes: %+v", len(c.Nodes), s)
		}
		for _, cn := range c.Nodes {
			n, err := ev.kube.CoreV1().Nodes().Get(ctx, cn.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if n.Labels[v1.NodeSchedulableLabel] != "true" {
				return fmt.Errorf("node %s not labelled %s=true: %v", cn.Name, v1.NodeSchedulableLabel, n.Labels)
			}
			if n.Annotations[v1.NodeHeartbeatAnnotation] == "" {
				return fmt.Errorf("node %s has no heartbeat (%s)", cn.Name, v1.NodeHeartbeatAnnotation)
			}
			// Each node's own agent registered its device plugins with
			// that node's kubelet.
			if q, ok := n.Status.Allocatable[launcherpod.ResourceTun]; !ok || q.Value() < 1 {
				return fmt.Errorf("node %s: no %s allocatable: %v", cn.Name, launcherpod.ResourceTun, n.Status.Allocatable)
			}
		}
		return nil
	})
	if err != nil {
		return ev, err
	}
	logf("node agent DaemonSet ready, %d nodes labelled %s=true with a heartbeat and %s allocatable, %s after apply", len(c.Nodes), v1.NodeSchedulableLabel, launcherpod.ResourceTun, time.Since(t0).Round(time.Millisecond))
	return ev, nil
}

// Heartbeats of the tests' kemu: the node agents beat every 5 s and the
// controller takes a node whose agent has not beaten for 40 s as gone
// (TestNodeFailure), instead of 1 min and 5 min.
const (
	heartbeatInterval = 5 * time.Second
	heartbeatTimeout  = 40 * time.Second
)

// Migrations of the tests' kemu: a target Pod that does not run within
// 45 s fails its migration (TestMigrationTargetNodeDown; KubeVirt's 5 and
// 15 min otherwise), one migration runs at a time in the cluster
// (TestMigrationParallelLimit; KubeVirt's 5 otherwise), and migrations are capped at 16 MiB/s so that one of
// an idle 128Mi guest transfers for about 6 s (a cancel while memory moves,
// TestMigrationCancelWhileTransferring) — except when benchmarking, where
// kemu's default (unlimited) is measured.
const (
	migrationTargetTimeout = 45 * time.Second
	migrationBandwidth     = "16Mi"
)

// benchmarking says whether this run measures benchmarks.
func benchmarking() bool {
	f := flag.Lookup("test.bench")
	return f != nil && f.Value.String() != ""
}

// controllerArgs are the tests' flags of kemu-controller.
func controllerArgs() []string {
	args := []string{"--node-heartbeat-timeout=" + heartbeatTimeout.String(),
		"--migration-pending-timeout=" + migrationTargetTimeout.String(),
		"--migration-unschedulable-timeout=" + migrationTargetTimeout.String(),
		"--parallel-migrations-per-cluster=1"}
	if !benchmarking() {
		args = append(args, "--bandwidth-per-migration="+migrationBandwidth)
	}
	return args
}

// writeOverlay writes a kustomization over deploy/overlays/throwaway (what
// make demo-cluster installs: containerDisks as image volumes): kemu-config allows
// hostDisks below <cluster dir>/hostdisks (TestHostileTenant), and the
// heartbeats are faster.
func (ev *env) writeOverlay() error {
	dir, err := os.MkdirTemp("", "kemu-e2e-overlay")
	if err != nil {
		return err
	}
	ev.hostDisks = filepath.Join(ev.c.Dir, "hostdisks")
	if err := os.MkdirAll(ev.hostDisks, 0o755); err != nil {
		return err
	}
	ev.overlay = dir
	return deploytest.Overlay(dir, "", deploytest.Config{
		Base:           deploytest.ThrowawayOverlay,
		HostDiskDirs:   ev.hostDisks,
		ControllerArgs: controllerArgs(),
		NodeAgentArgs:  []string{"--heartbeat-interval=" + heartbeatInterval.String()},
	})
}

// teardown deletes what the tests left (VMs first: they would recreate
// their VMIs) and uninstalls kemu; the cluster's Stop removes the rest.
func teardown(ev *env) {
	if ev.kube == nil {
		return
	}
	c := ev.c
	if _, stderr, err := c.Kubectl("-n", ns, "delete", "vm,vmi", "--all", "--timeout=3m"); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: deleting the VMs and VMIs: %v %s\n", err, stderr)
	}
	if ev.overlay != "" {
		if _, stderr, err := c.Kubectl("delete", "-k", ev.overlay, "--ignore-not-found", "--wait=false"); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: kubectl delete -k: %v %s\n", err, stderr)
		}
		os.RemoveAll(ev.overlay)
	}
	os.RemoveAll(filepath.Dir(ev.kemuctl))
}

// diagnostics is what makes a CI failure readable: Pods, VMIs, events, the
// logs of the kemu components and launchers, the kubelet's tail.
func diagnostics(c *cluster.Cluster) string {
	var b strings.Builder
	add := func(title string, args ...string) {
		out, stderr, err := c.Kubectl(args...)
		fmt.Fprintf(&b, "----- %s (kubectl %s)\n%s", title, strings.Join(args, " "), out)
		if err != nil {
			fmt.Fprintf(&b, "error: %v %s\n", err, stderr)
		}
	}
	add("pods", "get", "pods", "-A", "-o", "wide")
	add("VMIs", "get", "vmi,vm", "-A", "-o", "wide")
	add("VMI status", "get", "vmi", "-A", "-o", "jsonpath={range .items[*]}{.metadata.name}: {.status}{\"\\n\"}{end}")
	add("events", "get", "events", "-A", "--sort-by=.lastTimestamp")
	add("controller logs", "-n", kemuNS, "logs", "-l", controllerSelector, "--all-containers", "--tail=80", "--prefix")
	add("node agent logs", "-n", kemuNS, "logs", "-l", nodeagentSelector, "--all-containers", "--tail=120", "--prefix")
	add("launcher logs", "logs", "-A", "-l", launcherSelector, "--all-containers", "--tail=40", "--prefix", "--max-log-requests=20")
	for _, n := range c.Nodes {
		fmt.Fprintf(&b, "----- kubelet log of %s (tail)\n%s\n", n.Name, n.Logs("kubelet", 60))
	}
	return b.String()
}

// dumpOnFailure logs diagnostics when the test failed.
func dumpOnFailure(t testing.TB, ev *env) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("diagnostics:\n%s", diagnostics(ev.c))
		}
	})
}

// poll calls f every interval until it returns nil or ctx ends (then the
// last error is returned). The deadlines are hang protection only.
func poll(ctx context.Context, interval time.Duration, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(interval):
		}
	}
}

// waitKemuAPI waits until kemu-api serves and its webhooks answer.
func (ev *env) waitKemuAPI(ctx context.Context) error {
	return deploytest.WaitKemuAPI(ctx, ev.kube, ev.kemu, kemuNS, ns, containerDiskImage)
}
