package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Images every node has imported before Start returns (built offline by
// hack/images). Pods must use imagePullPolicy Never or IfNotPresent: no
// registry is reachable.
const (
	// PauseImage is the sandbox image: a static program that sleeps until
	// SIGTERM/SIGINT.
	PauseImage = "kemu.local/test/pause:1"
	// BusyboxImage holds Debian's static busybox as /bin/busybox, linked as
	// /bin/sh and a few applets (cat, echo, env, ls, mkdir, rm, sleep, test,
	// touch, true); entrypoint /bin/sh, in which every applet works.
	BusyboxImage = "kemu.local/test/busybox:1"

	// DefaultNodeLock is the file whose exclusive flock a cluster with nodes
	// holds from Start to Stop: the nodes' bridge, addresses and cgroups
	// are fixed names, so one such cluster runs per machine.
	DefaultNodeLock = "/run/kemu-test-node.lock"
	// NodeNamePrefix names the nodes: kemu-node-1, kemu-node-2, ...
	NodeNamePrefix = "kemu-node-"
	// MaxNodes is the most nodes a cluster may have.
	MaxNodes = 8

	// KubeletRoot, DevicePluginPath and KemuStateDir are paths inside every
	// node (its mount namespace), the same on each as on a real cluster;
	// Node.HostPath gives where the host sees them.
	KubeletRoot  = "/var/lib/kubelet"
	KemuStateDir = "/var/lib/kemu"
	podLogsRoot  = "/var/log/pods"

	// cniNetwork and cniBridge name each node's pod network (the bridge
	// lives in the node's network namespace, so every node has its own).
	cniNetwork = "kemu-test"
	cniBridge  = "kemucni0"
	cniBinDir  = "/usr/lib/cni"
)

// DevicePluginDir is the kubelet's device-plugin folder inside a node, fixed
// by the kubelet whatever its --root-dir.
var DevicePluginDir = filepath.Clean(pluginapi.DevicePluginPath)

// nodeBinaries are the host programs a node needs and where they come from.
var nodeBinaries = map[string]string{
	"runc":     "runc",
	"ip":       "iproute2",
	"unshare":  "util-linux",
	"nsenter":  "util-linux",
	"iptables": "iptables",
	"mount":    "mount",
	"go":       "the Go toolchain (it builds the pause image)",
}

// ContainerdBinaries are the nodes' container runtime, from the bin folder
// (make k8s builds containerd 2.x, hack/containerd/go.mod): the kubelet's
// image volumes need containerd 2.1 or newer, and Debian 12 has 1.6.
var ContainerdBinaries = []string{"containerd", "containerd-shim-runc-v2", "ctr"}

// Node is one Kubernetes node of a Cluster: its own network, mount and UTS
// namespaces (see docs/development.md, "The test cluster's nodes"), its own
// containerd and kubelet. Its methods are safe for concurrent use with the
// Cluster's, but not with each other's lifecycle calls (Stop, Start,
// RestartKubelet).
type Node struct {
	// Name is the Node's name and the namespace set's host name.
	Name string
	// Index is the node's position, from 0.
	Index int
	// IP is the node's address on the nodes' bridge (its InternalIP).
	IP string
	// PodCIDR is the node's Pod range; every node and the host route it.
	PodCIDR string
	// Dir is the node's folder on the host. What the node sees as /var/lib
	// and /var/log is in it (HostPath maps one to the other).
	Dir string
	// ContainerdSocket is the node's containerd (CRI) socket, the same
	// path on the host and in the node.
	ContainerdSocket string
	// StartupDuration is how long the node took from creating its
	// namespaces to being Ready.
	StartupDuration time.Duration

	c           *Cluster
	holder      *process // pid 1 of nothing: holds the namespaces
	kubeletArgs []string
	healthzURL  string
}

// nodeBinds are the node's private folders: what the node sees at target
// is <Node.Dir>/<source> on the host. (/run is a tmpfs of the node's own.)
var nodeBinds = []struct{ source, target string }{
	{"var-lib", "/var/lib"},
	{"var-log", "/var/log"},
}

// nodeIP, nodePodCIDR: node i's address and Pod range.
func nodeIP(i int) string      { return fmt.Sprintf("10.250.0.%d", 11+i) }
func nodePodCIDR(i int) string { return fmt.Sprintf("10.244.%d.0/24", 11+i) }

const (
	// nodesBridge is the host bridge every node's veth is a port of; the
	// host has bridgeIP on it and the API server listens there.
	nodesBridge  = "kemunodes0"
	bridgeIP     = "10.250.0.1"
	bridgePrefix = 24
)

func newNode(c *Cluster, i int) *Node {
	name := fmt.Sprintf("%s%d", NodeNamePrefix, i+1)
	dir := filepath.Join(c.Dir, name)
	return &Node{
		Name:             name,
		Index:            i,
		IP:               nodeIP(i),
		PodCIDR:          nodePodCIDR(i),
		Dir:              dir,
		ContainerdSocket: filepath.Join(dir, "containerd", "containerd.sock"),
		c:                c,
	}
}

// cgroupRoot is the node's kubelet --cgroup-root.
func (n *Node) cgroupRoot() string { return "/" + n.Name }

// HostPath is where the host sees the file the node sees at p. Below the
// node's /var/lib and /var/log it is the backing folder in Dir (files and
// unix sockets there are the node's own; a mount the node made there, such
// as a Pod's secret volume, is not visible on the host: use ProcPath). Other
// paths are the same on the host and in the node.
func (n *Node) HostPath(p string) string {
	p = filepath.Clean(p)
	for _, b := range nodeBinds {
		if p == b.target || strings.HasPrefix(p, b.target+"/") {
			return filepath.Join(n.Dir, b.source, strings.TrimPrefix(p, b.target))
		}
	}
	return p
}

// ProcPath is the node's p through the namespace holder's /proc/<pid>/root:
// every mount the node has is visible there. Often too long for a unix
// socket address.
func (n *Node) ProcPath(p string) string {
	return fmt.Sprintf("/proc/%d/root%s", n.holder.pid(), filepath.Clean(p))
}

// KubeletRootDir is the kubelet root as seen from the host.
func (n *Node) KubeletRootDir() string { return n.HostPath(KubeletRoot) }

// DevicePluginDir is the kubelet's device-plugin folder as seen from the host.
func (n *Node) DevicePluginDir() string { return n.HostPath(DevicePluginDir) }

// Command is a command that runs inside the node's namespaces (through
// nsenter, which execs it: its pid is the command's).
func (n *Node) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "nsenter", append(n.nsenterArgs(), append([]string{"--", name}, args...)...)...)
}

func (n *Node) nsenterArgs() []string {
	return []string{fmt.Sprintf("--target=%d", n.holder.pid()), "--net", "--mount", "--uts"}
}

// startInNode starts a cluster process inside the node's namespaces.
func (n *Node) startInNode(name, bin string, args []string) (*process, error) {
	if !filepath.IsAbs(bin) {
		bin = filepath.Join(n.c.BinDir, bin)
	}
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return nil, fmt.Errorf("cluster: node %s: %w", n.Name, err)
	}
	return n.c.start(n.Name+"/"+name, nsenter, append(n.nsenterArgs(), append([]string{"--", bin}, args...)...))
}

// start brings the node up: namespaces and network, containerd, the
// images, the kubelet; it returns once the Node is Ready.
func (n *Node) start(ctx context.Context, opts Options, imgDir, wrapper string) error {
	t0 := time.Now()
	for _, d := range []string{filepath.Join(n.Dir, "containerd"), filepath.Join(n.Dir, "cni", "net.d")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("cluster: node %s: %w", n.Name, err)
		}
	}
	if err := n.startNamespaces(ctx); err != nil {
		return err
	}
	if err := n.routeKubernetesService(ctx); err != nil {
		return err
	}
	netConf, netConfText := n.podNetworkConf(opts.Multus), cniConflist(n.PodCIDR)
	if opts.Multus {
		netConfText = cniConf(n.PodCIDR)
	}
	if err := os.WriteFile(netConf, []byte(netConfText), 0o644); err != nil {
		return fmt.Errorf("cluster: node %s: %w", n.Name, err)
	}
	binDir := cniBinDir
	if opts.Multus {
		var err error
		if binDir, err = n.setupMultus(opts); err != nil {
			return err
		}
	}
	ctrConfig := filepath.Join(n.Dir, "containerd", "config.toml")
	if err := os.WriteFile(ctrConfig, []byte(containerdConfig(n.Dir, wrapper, binDir)), 0o644); err != nil {
		return fmt.Errorf("cluster: node %s: %w", n.Name, err)
	}
	if err := n.startContainerd(ctx); err != nil {
		return err
	}
	for _, img := range []string{"pause", "busybox"} {
		if err := n.ImportImage(ctx, filepath.Join(imgDir, img+".oci.tar")); err != nil {
			return err
		}
	}
	kubeletConfig := filepath.Join(n.Dir, "kubelet-config.yaml")
	if err := os.WriteFile(kubeletConfig, []byte(kubeletConfigYAML(n, opts)), 0o644); err != nil {
		return fmt.Errorf("cluster: node %s: %w", n.Name, err)
	}
	n.healthzURL = fmt.Sprintf("http://%s:%d/healthz", n.IP, kubeletHealthzPort)
	n.kubeletArgs = append([]string{
		"--config=" + kubeletConfig,
		"--kubeconfig=" + n.c.Kubeconfig,
		"--hostname-override=" + n.Name,
		"--node-ip=" + n.IP,
		"--v=1",
	}, opts.KubeletArgs...)
	if err := n.startKubelet(ctx, time.Time{}, nil); err != nil {
		return err
	}
	n.StartupDuration = time.Since(t0)
	n.c.logf("cluster: node %s (%s, Pods %s) Ready in %s", n.Name, n.IP, n.PodCIDR, n.StartupDuration.Round(time.Millisecond))
	return nil
}

// KubernetesServiceIP is the "kubernetes" Service's ClusterIP (the first
// address of --service-cluster-ip-range), which Pods find in
// KUBERNETES_SERVICE_HOST.
const KubernetesServiceIP = "10.0.0.1"

// routeKubernetesService does the one thing kube-proxy would do on a test
// node: the node's (and its Pods') connections to the "kubernetes" Service,
// KubernetesServiceIP:443, go to the API server on the bridge. In-cluster
// clients then work unchanged.
func (n *Node) routeKubernetesService(ctx context.Context) error {
	to := strings.TrimPrefix(n.c.Host, "https://")
	for _, chain := range []string{"PREROUTING", "OUTPUT"} {
		out, err := n.Command(ctx, "iptables", "-w", "-t", "nat", "-A", chain, "-d", KubernetesServiceIP+"/32", "-p", "tcp", "--dport", "443",
			"-j", "DNAT", "--to-destination", to).CombinedOutput()
		if err != nil {
			return fmt.Errorf("cluster: node %s: the kubernetes Service: iptables %s: %w: %s", n.Name, chain, err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

func (n *Node) startContainerd(ctx context.Context) error {
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return fmt.Errorf("cluster: node %s: %w", n.Name, err)
	}
	// containerd finds its shim on PATH: the bin folder's, first.
	args := append(n.nsenterArgs(), "--", filepath.Join(n.c.BinDir, "containerd"),
		"--config="+filepath.Join(n.Dir, "containerd", "config.toml"), "--log-level=warn")
	ctrd, err := n.c.startEnv(n.Name+"/containerd", nsenter, args, []string{"PATH=" + n.c.BinDir + ":" + os.Getenv("PATH")})
	if err != nil {
		return err
	}
	if err := poll(ctx, ctrd, 100*time.Millisecond, func() error {
		_, err := n.Ctr(ctx, "version")
		return err
	}); err != nil {
		return n.c.procErr(ctrd, "containerd of "+n.Name+" did not answer", err)
	}
	return nil
}

// startKubelet starts the kubelet with the node's arguments and waits until
// its healthz answers, its device-plugin registration socket exists (and is
// not oldSock) and the Node is Ready with a heartbeat not older than since
// (zero: any).
func (n *Node) startKubelet(ctx context.Context, since time.Time, oldSock os.FileInfo) error {
	kl, err := n.startInNode("kubelet", "kubelet", n.kubeletArgs)
	if err != nil {
		return err
	}
	if err := waitHTTP(ctx, kl, &http.Client{Timeout: 5 * time.Second}, n.healthzURL, nil, nil); err != nil {
		return n.c.procErr(kl, "kubelet of "+n.Name+" did not become healthy", err)
	}
	sock := filepath.Join(n.DevicePluginDir(), "kubelet.sock")
	if err := poll(ctx, kl, 50*time.Millisecond, func() error {
		fi, err := os.Stat(sock)
		// A new socket can get the old one's inode number: compare the
		// modification time too.
		if err == nil && oldSock != nil && os.SameFile(fi, oldSock) && fi.ModTime().Equal(oldSock.ModTime()) {
			err = fmt.Errorf("%s is still the old kubelet's", sock)
		}
		return err
	}); err != nil {
		return n.c.procErr(kl, "kubelet of "+n.Name+" did not serve its device-plugin registration socket", err)
	}
	if err := n.waitReady(ctx, kl, since); err != nil {
		return n.c.procErr(kl, "node "+n.Name+" did not become Ready", err)
	}
	return nil
}

// WaitReady waits until the Node's Ready condition is True.
func (n *Node) WaitReady(ctx context.Context) error {
	kl := n.c.proc(n.Name + "/kubelet")
	if kl == nil {
		return fmt.Errorf("cluster: the kubelet of %s is not running", n.Name)
	}
	return n.waitReady(ctx, kl, time.Time{})
}

func (n *Node) waitReady(ctx context.Context, kl *process, since time.Time) error {
	cs, err := kubernetes.NewForConfig(n.c.RESTConfig())
	if err != nil {
		return err
	}
	since = since.Truncate(time.Second)
	return poll(ctx, kl, 200*time.Millisecond, func() error {
		node, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type != corev1.NodeReady {
				continue
			}
			if cond.Status != corev1.ConditionTrue {
				return fmt.Errorf("node %s Ready=%s: %s", n.Name, cond.Status, cond.Message)
			}
			if cond.LastHeartbeatTime.Time.Before(since) {
				return fmt.Errorf("node %s: last heartbeat %s is from before the kubelet restart", n.Name, cond.LastHeartbeatTime)
			}
			return nil
		}
		return fmt.Errorf("node %s has no Ready condition yet", n.Name)
	})
}

// RestartKubelet stops the kubelet (SIGTERM, then SIGKILL) and starts it
// again with the same settings; Pods and containerd keep running. It
// returns once the new kubelet is healthy and has reported the Node Ready.
func (n *Node) RestartKubelet(ctx context.Context) error {
	ctx, cancel := withDefaultTimeout(ctx, 2*time.Minute)
	defer cancel()
	t0 := time.Now()
	oldSock, _ := os.Stat(filepath.Join(n.DevicePluginDir(), "kubelet.sock"))
	if err := n.c.stopProc(n.Name+"/kubelet", 10*time.Second); err != nil {
		return err
	}
	if err := n.startKubelet(ctx, t0, oldSock); err != nil {
		return err
	}
	n.c.logf("cluster: kubelet of %s restarted in %s", n.Name, time.Since(t0).Round(time.Millisecond))
	return nil
}

// Stop fails the node as a machine that loses power would: the kubelet,
// every Pod's processes, containerd and its shims die at once (SIGKILL); the
// API server is not told. The namespaces, the node's address and its disk
// (/var/lib: the kubelet's and containerd's state, the images) stay, so
// Start brings the same node back.
func (n *Node) Stop() error {
	t0 := time.Now()
	errs := []error{n.c.stopProc(n.Name+"/kubelet", 0)}
	errs = append(errs, killCgroupProcs(nodeCgroupDirs(n.Name), 10*time.Second))
	errs = append(errs, n.c.stopProc(n.Name+"/containerd", 0))
	// Shims name the node's containerd socket in their -address.
	errs = append(errs, killMentioning(n.Dir+"/", 10*time.Second))
	n.c.logf("cluster: node %s stopped in %s", n.Name, time.Since(t0).Round(time.Millisecond))
	return errors.Join(errs...)
}

// Start brings a stopped node back: containerd, then the kubelet; it
// returns once the Node is Ready again.
func (n *Node) Start(ctx context.Context) error {
	ctx, cancel := withDefaultTimeout(ctx, 2*time.Minute)
	defer cancel()
	t0 := time.Now()
	if n.c.proc(n.Name+"/kubelet") != nil {
		return fmt.Errorf("cluster: node %s is running", n.Name)
	}
	if err := n.startContainerd(ctx); err != nil {
		return err
	}
	if err := n.startKubelet(ctx, t0, nil); err != nil {
		return err
	}
	n.c.logf("cluster: node %s started again in %s", n.Name, time.Since(t0).Round(time.Millisecond))
	return nil
}

// Ctr runs ctr against the node's containerd in the k8s.io namespace and
// returns its combined output.
func (n *Node) Ctr(ctx context.Context, args ...string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	full := append([]string{"--address=" + n.ContainerdSocket, "--namespace=k8s.io"}, args...)
	out, err := exec.CommandContext(cctx, filepath.Join(n.c.BinDir, "ctr"), full...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr (%s) %s: %w: %s", n.Name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// ImportImage loads an image archive (OCI layout or `docker save` tar) into
// the node's containerd, where its kubelet sees it.
func (n *Node) ImportImage(ctx context.Context, archive string) error {
	if _, err := n.Ctr(ctx, "images", "import", archive); err != nil {
		return fmt.Errorf("cluster: importing %s on %s: %w", archive, n.Name, err)
	}
	return nil
}

// Logs returns the last n lines of one of the node's process logs
// ("kubelet", "containerd", "netns").
func (n *Node) Logs(name string, lines int) string {
	return tailFile(n.LogPath(name), lines)
}

// LogPath is the file one of the node's processes logs to (appended to by
// a restart, after a "+ <command line>" line).
func (n *Node) LogPath(name string) string { return filepath.Join(n.Dir, name+".log") }

// startNodes brings up every node (the caller holds the node lock and has
// set up the bridge): the images are built once, the nodes start one after
// the other (two kubelets starting at once only compete for the CPU),
// then kube-scheduler.
func (c *Cluster) startNodes(ctx context.Context, opts Options) error {
	t0 := time.Now()
	imgDir := filepath.Join(c.Dir, "images")
	if err := c.buildImages(ctx, imgDir); err != nil {
		return err
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		return fmt.Errorf("cluster: node: %w (run: bash hack/install-deps.sh)", err)
	}
	wrapper := filepath.Join(c.Dir, "runc-wrapper")
	if err := os.WriteFile(wrapper, []byte(strings.ReplaceAll(runcWrapper, "exec runc", "exec "+runc)), 0o755); err != nil {
		return fmt.Errorf("cluster: node: %w", err)
	}
	for _, n := range c.Nodes {
		if err := n.start(ctx, opts, imgDir, wrapper); err != nil {
			return err
		}
	}
	if _, err := c.start("kube-scheduler", "kube-scheduler", append([]string{
		"--kubeconfig=" + c.Kubeconfig,
		"--authentication-kubeconfig=" + c.Kubeconfig,
		"--authorization-kubeconfig=" + c.Kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=0",
	}, opts.SchedulerArgs...)); err != nil {
		return err
	}
	c.NodeStartupDuration = time.Since(t0)
	return nil
}

// stopNodes stops every node's kubelet, kube-scheduler, the Pods'
// processes, containerd and the namespaces, puts the host back as it was
// (see cleanupHost) and releases the node lock. If the cleanup fails, its
// record stays in the lock file and the next node start retries it.
func (c *Cluster) stopNodes() error {
	if c.lock == nil {
		return nil
	}
	t0 := time.Now()
	var errs []error
	for _, n := range c.Nodes {
		errs = append(errs, c.stopProc(n.Name+"/kubelet", 5*time.Second))
	}
	errs = append(errs, c.stopProc("kube-scheduler", 5*time.Second))
	if c.host != nil {
		// Pods first, so that containerd's shims see their tasks exit.
		errs = append(errs, killCgroupProcs(c.host.NodeCgroups, 10*time.Second))
	}
	for _, n := range c.Nodes {
		errs = append(errs, c.stopProc(n.Name+"/containerd", 5*time.Second))
	}
	// Anything else naming the folder (shims), then the namespace holders:
	// with their last process the namespaces go, and every mount and
	// network device in them.
	errs = append(errs, killMentioning(c.Dir+"/", 10*time.Second))
	for _, n := range c.Nodes {
		errs = append(errs, c.stopProc(n.Name+"/netns", 5*time.Second))
	}
	if c.host != nil {
		if err := cleanupHost(c.host); err != nil {
			errs = append(errs, err)
			// What was put back is off the record (hugepages).
			_ = saveHostState(c.lock, c.host)
		} else if err := saveHostState(c.lock, nil); err != nil {
			errs = append(errs, fmt.Errorf("cluster: node lock: %w", err))
		}
	}
	if err := c.lock.Close(); err != nil {
		errs = append(errs, fmt.Errorf("cluster: node lock: %w", err))
	}
	c.lock = nil
	c.logf("cluster: nodes stopped and cleaned up in %s", time.Since(t0).Round(time.Millisecond))
	return errors.Join(errs...)
}

// buildImages runs hack/images into dir.
func (c *Cluster) buildImages(ctx context.Context, dir string) error {
	root, err := RepoRoot()
	if err != nil {
		return fmt.Errorf("cluster: node images: %w", err)
	}
	cmd := exec.CommandContext(ctx, "go", "run", "./hack/images", "-out", dir)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("cluster: node images: go run ./hack/images: %w\n%s", err, out)
	}
	return nil
}

// proc returns the running process called name, or nil.
func (c *Cluster) proc(name string) *process {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		if p.name == name && !p.exited() {
			return p
		}
	}
	return nil
}

// stopProc stops the processes called name and forgets them.
func (c *Cluster) stopProc(name string, grace time.Duration) error {
	c.mu.Lock()
	var victims, keep []*process
	for _, p := range c.procs {
		if p.name == name {
			victims = append(victims, p)
		} else {
			keep = append(keep, p)
		}
	}
	c.procs = keep
	c.mu.Unlock()
	var errs []error
	for _, p := range victims {
		errs = append(errs, p.stop(grace))
	}
	return errors.Join(errs...)
}

// withDefaultTimeout bounds ctx by d unless it has a deadline already.
func withDefaultTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

// poll calls f every interval until it returns nil, p exits or ctx ends.
func poll(ctx context.Context, p *process, interval time.Duration, f func() error) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited (%v); last error: %v", p.name, p.waitErr, err)
		case <-ctx.Done():
			return fmt.Errorf("%w; last error: %v", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// checkNodePrereqs reports what a node needs and does not find, with what to
// run.
func checkNodePrereqs() error {
	var problems []string
	if runtime.GOOS != "linux" {
		return fmt.Errorf("cluster: a node runs on Linux only, not %s", runtime.GOOS)
	}
	if os.Geteuid() != 0 {
		problems = append(problems, "a node needs root (namespaces, kubelet, containerd, mounts, cgroups)")
	}
	var pkgs []string
	for bin, pkg := range nodeBinaries {
		if _, err := exec.LookPath(bin); err != nil {
			problems = append(problems, fmt.Sprintf("%s not in PATH (%s)", bin, pkg))
			pkgs = append(pkgs, pkg)
		}
	}
	for _, plugin := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniBinDir, plugin)); err != nil {
			problems = append(problems, fmt.Sprintf("CNI plugin %s missing (containernetworking-plugins)", filepath.Join(cniBinDir, plugin)))
			pkgs = append(pkgs, "containernetworking-plugins")
		}
	}
	if _, err := os.Stat("/bin/busybox"); err != nil {
		problems = append(problems, "/bin/busybox missing (busybox-static)")
		pkgs = append(pkgs, "busybox-static")
	}
	if len(problems) > 0 {
		hint := "run: bash hack/install-deps.sh"
		if len(pkgs) == 0 {
			hint = "run the tests as root"
		}
		return fmt.Errorf("cluster: a node cannot start here: %s; %s", strings.Join(problems, "; "), hint)
	}
	return nil
}

// runcWrapper is the runtime binary containerd's shim runs instead of runc.
// Without CAP_SYS_RESOURCE (as in some CI sandboxes) runc cannot set a
// negative oom_score_adj and fails with "can't get final child's PID from
// pipe: EOF"; the wrapper rewrites negative oomScoreAdj values in the bundle's
// config.json (and an exec's process.json) to 0, then execs runc.
const runcWrapper = `#!/bin/sh
# Written by kemu's test/cluster: runc with negative oomScoreAdj rewritten to 0.
prev=
for a in "$@"; do
	case "$prev" in
	--bundle|-b) [ -f "$a/config.json" ] && sed -i 's/"oomScoreAdj":-[0-9]*/"oomScoreAdj":0/' "$a/config.json" ;;
	--process|-p) [ -f "$a" ] && sed -i 's/"oomScoreAdj":-[0-9]*/"oomScoreAdj":0/' "$a" ;;
	esac
	case "$a" in
	--bundle=*) b=${a#--bundle=}; [ -f "$b/config.json" ] && sed -i 's/"oomScoreAdj":-[0-9]*/"oomScoreAdj":0/' "$b/config.json" ;;
	esac
	prev=$a
done
exec runc "$@"
`

// podNetworkConf is the file of the node's Pod network: a conflist, or,
// with Multus in front of it, a single plugin's conf (cniConf).
func (n *Node) podNetworkConf(multus bool) string {
	if multus {
		return filepath.Join(n.Dir, "cni", "net.d", "10-"+cniNetwork+".conf")
	}
	return filepath.Join(n.Dir, "cni", "net.d", "10-"+cniNetwork+".conflist")
}

// cniConflist is a node's Pod network: a bridge in the node's network
// namespace, with host-local addresses from the node's range (state in the
// node's /var/lib/cni). The node routes other nodes' ranges (startNamespaces).
func cniConflist(podCIDR string) string {
	b, _ := json.MarshalIndent(map[string]any{
		"cniVersion": "0.4.0",
		"name":       cniNetwork,
		"plugins":    []any{cniBridgePlugin(podCIDR)},
	}, "", "  ")
	return string(b)
}

// cniConf is the same network as a single plugin's conf (with Multus:
// Multus 4.2 and 4.3 delete a conflist delegate with a copy that lost every
// plugin-specific field, the bridge's IPAM ranges included, and so never
// delete the Pod's network — multus-cni issue 1449, fixed after 4.3.0 by
// its pull request 1521; a single conf's bytes are kept whole).
func cniConf(podCIDR string) string {
	conf := cniBridgePlugin(podCIDR)
	conf["cniVersion"], conf["name"] = "0.4.0", cniNetwork
	b, _ := json.MarshalIndent(conf, "", "  ")
	return string(b)
}

func cniBridgePlugin(podCIDR string) map[string]any {
	return map[string]any{
		"type":        "bridge",
		"bridge":      cniBridge,
		"isGateway":   true,
		"ipMasq":      false,
		"hairpinMode": true,
		"ipam": map[string]any{
			"type":   "host-local",
			"ranges": [][]map[string]string{{{"subnet": podCIDR}}},
			"routes": []map[string]string{{"dst": "0.0.0.0/0"}},
		},
	}
}

// containerdConfig keeps containerd's root, state, sockets and runc's state
// in the node's folder (so its shims name the folder in their command line),
// its CNI config too.
func containerdConfig(nodeDir, wrapper, binDir string) string {
	ctrDir := filepath.Join(nodeDir, "containerd")
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[6]q
  disable_apparmor = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = %[7]q
        Root = %[8]q
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[9]q
    conf_dir = %[10]q
    max_conf_num = 1
`,
		filepath.Join(ctrDir, "root"), filepath.Join(ctrDir, "state"),
		filepath.Join(ctrDir, "containerd.sock"), filepath.Join(ctrDir, "containerd.sock.ttrpc"),
		filepath.Join(ctrDir, "opt"), PauseImage, wrapper, filepath.Join(ctrDir, "runc"),
		binDir, filepath.Join(nodeDir, "cni", "net.d"))
}

// kubeletHealthzPort is the kubelet's healthz port on the node's address.
const kubeletHealthzPort = 10248

// StaticCPUReservation is the systemReserved CPU of a node with
// Options.StaticCPUManager. The static policy needs a reservation above
// zero and keeps its ceiling (one whole CPU) from exclusive use, while
// allocatable CPU drops by this much only: reservedSystemCPUs: "0" would
// take a whole CPU off allocatable, leaving 1 of the machine's 2 CPUs,
// and a Pod asking for that one CPU would not fit next to any other Pod
// requesting CPU on the node (the node agent's).
const StaticCPUReservation = "100m"

// kubeletConfigYAML is a KubeletConfiguration for a throw-away test node on a
// cgroup v1 (or v2) host with a small disk: the node's own cgroup root,
// relaxed eviction and image GC, anonymous access with AlwaysAllow (so
// kubectl logs/exec work through the apiserver without kubelet client
// certificates). Ports are the defaults: each node has its own network.
// With opts.StaticCPUManager, the static CPU manager policy. Its state
// file (<root-dir>/cpu_manager_state) is in the node's /var/lib, new with
// each cluster, and the policy is the same for the cluster's life
// (Node.Start, RestartKubelet): the kubelet refuses to start on a state
// file of another policy.
func kubeletConfigYAML(n *Node, opts Options) string {
	var cpuManager string
	if opts.StaticCPUManager {
		cpuManager = fmt.Sprintf("cpuManagerPolicy: static\nsystemReserved:\n  cpu: %s\n", StaticCPUReservation)
	}
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %s
failSwapOn: false
containerRuntimeEndpoint: unix://%s
podLogsDir: %s
address: 0.0.0.0
port: 10250
readOnlyPort: 0
healthzBindAddress: %s
healthzPort: %d
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
evictionPressureTransitionPeriod: 5s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
imageMinimumGCAge: 24h
nodeStatusUpdateFrequency: 2s
nodeStatusReportFrequency: 10s
syncFrequency: 10s
serializeImagePulls: false
shutdownGracePeriod: 0s
shutdownGracePeriodCriticalPods: 0s
resolvConf: /etc/resolv.conf
%s`, n.cgroupRoot(), n.ContainerdSocket, podLogsRoot, n.IP, kubeletHealthzPort, cpuManager)
}

// errNoNodes is what node methods of a Cluster without nodes return.
var errNoNodes = errors.New("cluster: no nodes (Options.Nodes)")

// Node returns the node called name, or nil.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// WaitNodeReady waits until every node is Ready.
func (c *Cluster) WaitNodeReady(ctx context.Context) error {
	if len(c.Nodes) == 0 {
		return errNoNodes
	}
	for _, n := range c.Nodes {
		if err := n.WaitReady(ctx); err != nil {
			return err
		}
	}
	return nil
}

// RestartKubelet restarts the first node's kubelet (Node.RestartKubelet).
func (c *Cluster) RestartKubelet(ctx context.Context) error {
	if len(c.Nodes) == 0 {
		return errNoNodes
	}
	return c.Nodes[0].RestartKubelet(ctx)
}

// Ctr runs ctr against the first node's containerd (Node.Ctr).
func (c *Cluster) Ctr(ctx context.Context, args ...string) (string, error) {
	if len(c.Nodes) == 0 {
		return "", errNoNodes
	}
	return c.Nodes[0].Ctr(ctx, args...)
}

// ImportImage loads an image archive into every node's containerd.
func (c *Cluster) ImportImage(ctx context.Context, archive string) error {
	if len(c.Nodes) == 0 {
		return errNoNodes
	}
	for _, n := range c.Nodes {
		if err := n.ImportImage(ctx, archive); err != nil {
			return err
		}
	}
	return nil
}

// lockNode takes the exclusive flock on path, polling until timeout. The
// returned file holds the lock until it is closed (also when the test process
// dies).
func lockNode(ctx context.Context, path string, timeout time.Duration, logf func(string, ...any)) (*os.File, time.Duration, error) {
	t0 := time.Now()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, 0, fmt.Errorf("cluster: node lock: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	logged := false
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := tryFlock(f)
		if err != nil {
			f.Close()
			return nil, 0, fmt.Errorf("cluster: node lock %s: %w", path, err)
		}
		if ok {
			return f, time.Since(t0), nil
		}
		if !logged {
			logf("cluster: waiting for %s (another test process runs the node)", path)
			logged = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, 0, fmt.Errorf("cluster: node lock %s still held by another process after %s: %w", path, timeout, ctx.Err())
		case <-tick.C:
		}
	}
}
