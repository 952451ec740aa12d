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

// Images the node has imported before Start returns (built offline by
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

	// DefaultNodeLock is the file whose exclusive flock a node holds from
	// Start to Stop: only one kubelet and containerd can run per machine.
	DefaultNodeLock = "/run/kemu-test-node.lock"
	// NodeName is the name the test node registers under.
	NodeName = "kemu-test-node"

	// cniNetwork and cniBridge name the node's pod network; podSubnet is its
	// host-local range.
	cniNetwork = "kemu-test"
	cniBridge  = "kemutest0"
	podSubnet  = "10.244.222.0/24"
	cniBinDir  = "/usr/lib/cni"
)

// nodeBinaries are the host programs a node needs and where they come from.
var nodeBinaries = map[string]string{
	"containerd":              "containerd",
	"containerd-shim-runc-v2": "containerd",
	"ctr":                     "containerd",
	"runc":                    "runc",
	"ip":                      "iproute2",
	"go":                      "the Go toolchain (it builds the pause image)",
}

// node is the state of the node part of a Cluster.
type node struct {
	lock        *os.File // holds the flock until Stop
	lockWait    time.Duration
	host        *hostState
	kubeletArgs []string
	healthzURL  string
}

// startNode brings up containerd, the images, kube-scheduler and kubelet and
// waits until the Node is Ready. The caller holds the node lock.
func (c *Cluster) startNode(ctx context.Context, opts Options) error {
	t0 := time.Now()
	nd := c.node
	ctrDir := filepath.Join(c.Dir, "containerd")
	c.ContainerdSocket = filepath.Join(ctrDir, "containerd.sock")
	c.KubeletRootDir = filepath.Join(c.Dir, "kubelet")
	// The kubelet's device manager serves kubelet.sock at this fixed path,
	// whatever --root-dir says (pluginapi.KubeletSocket).
	c.DevicePluginDir = filepath.Clean(pluginapi.DevicePluginPath)
	c.PodLogsDir = filepath.Join(c.Dir, "pod-logs")
	c.NodeName = NodeName
	for _, d := range []string{ctrDir, c.KubeletRootDir, c.PodLogsDir, filepath.Join(c.Dir, "cni", "net.d")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("cluster: node: %w", err)
		}
	}

	// Images first: a missing toolchain or busybox fails before anything runs.
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
	conflist := filepath.Join(c.Dir, "cni", "net.d", "10-"+cniNetwork+".conflist")
	if err := os.WriteFile(conflist, []byte(cniConflist(filepath.Join(c.Dir, "cni", "ipam"))), 0o644); err != nil {
		return fmt.Errorf("cluster: node: %w", err)
	}
	ctrConfig := filepath.Join(ctrDir, "config.toml")
	if err := os.WriteFile(ctrConfig, []byte(containerdConfig(c.Dir, ctrDir, wrapper)), 0o644); err != nil {
		return fmt.Errorf("cluster: node: %w", err)
	}
	containerd, err := exec.LookPath("containerd")
	if err != nil {
		return fmt.Errorf("cluster: node: %w (run: bash hack/install-deps.sh)", err)
	}
	ctrd, err := c.start("containerd", containerd, []string{"--config=" + ctrConfig, "--log-level=warn"})
	if err != nil {
		return err
	}
	if err := poll(ctx, ctrd, 100*time.Millisecond, func() error {
		_, err := c.Ctr(ctx, "version")
		return err
	}); err != nil {
		return c.procErr(ctrd, "containerd did not answer", err)
	}
	for _, img := range []string{"pause", "busybox"} {
		if err := c.ImportImage(ctx, filepath.Join(imgDir, img+".oci.tar")); err != nil {
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

	ports, err := freePorts(2)
	if err != nil {
		return fmt.Errorf("cluster: node: %w", err)
	}
	kubeletConfig := filepath.Join(c.Dir, "kubelet-config.yaml")
	if err := os.WriteFile(kubeletConfig, []byte(kubeletConfigYAML(c.ContainerdSocket, c.PodLogsDir, ports[0], ports[1])), 0o644); err != nil {
		return fmt.Errorf("cluster: node: %w", err)
	}
	nd.healthzURL = fmt.Sprintf("http://127.0.0.1:%d/healthz", ports[1])
	nd.kubeletArgs = append([]string{
		"--config=" + kubeletConfig,
		"--kubeconfig=" + c.Kubeconfig,
		"--root-dir=" + c.KubeletRootDir,
		"--cert-dir=" + filepath.Join(c.KubeletRootDir, "pki"),
		"--hostname-override=" + NodeName,
		"--v=1",
	}, opts.KubeletArgs...)
	if err := c.startKubelet(ctx, time.Time{}, nil); err != nil {
		return err
	}
	c.NodeStartupDuration = time.Since(t0)
	c.logf("cluster: node %s Ready in %s (kubelet root %s)", NodeName, c.NodeStartupDuration.Round(time.Millisecond), c.KubeletRootDir)
	return nil
}

// stopNode stops the kubelet, kube-scheduler, the pods' processes and
// containerd, puts the host back as it was (see cleanupHost) and releases
// the node lock. If the cleanup fails, its record stays in the lock file and
// the next node start retries it.
func (c *Cluster) stopNode() error {
	nd := c.node
	if nd == nil || nd.lock == nil {
		return nil
	}
	t0 := time.Now()
	errs := []error{
		c.stopProc("kubelet", 5*time.Second),
		c.stopProc("kube-scheduler", 5*time.Second),
	}
	if nd.host != nil {
		// Pods first, so that containerd's shims see their tasks exit.
		errs = append(errs, killCgroupProcs(nd.host.Cgroups, 10*time.Second))
	}
	errs = append(errs, c.stopProc("containerd", 5*time.Second))
	if nd.host != nil {
		if err := cleanupHost(nd.host); err != nil {
			errs = append(errs, err)
		} else if err := saveHostState(nd.lock, nil); err != nil {
			errs = append(errs, fmt.Errorf("cluster: node lock: %w", err))
		}
	}
	if err := nd.lock.Close(); err != nil {
		errs = append(errs, fmt.Errorf("cluster: node lock: %w", err))
	}
	nd.lock = nil
	c.logf("cluster: node stopped and cleaned up in %s", time.Since(t0).Round(time.Millisecond))
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

// startKubelet starts the kubelet with the node's arguments and waits until
// its healthz answers, its device-plugin registration socket exists (and is
// not oldSock) and the Node is Ready with a heartbeat not older than since
// (zero: any).
func (c *Cluster) startKubelet(ctx context.Context, since time.Time, oldSock os.FileInfo) error {
	kl, err := c.start("kubelet", "kubelet", c.node.kubeletArgs)
	if err != nil {
		return err
	}
	if err := waitHTTP(ctx, kl, &http.Client{Timeout: 5 * time.Second}, c.node.healthzURL, nil, nil); err != nil {
		return c.procErr(kl, "kubelet did not become healthy", err)
	}
	sock := filepath.Join(c.DevicePluginDir, "kubelet.sock")
	if err := poll(ctx, kl, 50*time.Millisecond, func() error {
		fi, err := os.Stat(sock)
		// A new socket can get the old one's inode number: compare the
		// modification time too.
		if err == nil && oldSock != nil && os.SameFile(fi, oldSock) && fi.ModTime().Equal(oldSock.ModTime()) {
			err = fmt.Errorf("%s is still the old kubelet's", sock)
		}
		return err
	}); err != nil {
		return c.procErr(kl, "kubelet did not serve its device-plugin registration socket", err)
	}
	if err := c.waitNodeReady(ctx, kl, since); err != nil {
		return c.procErr(kl, "node did not become Ready", err)
	}
	return nil
}

// WaitNodeReady waits until the Node's Ready condition is True.
func (c *Cluster) WaitNodeReady(ctx context.Context) error {
	if c.node == nil {
		return errors.New("cluster: no node (Options.Node)")
	}
	kl := c.proc("kubelet")
	if kl == nil {
		return errors.New("cluster: the kubelet is not running")
	}
	return c.waitNodeReady(ctx, kl, time.Time{})
}

func (c *Cluster) waitNodeReady(ctx context.Context, kl *process, since time.Time) error {
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		return err
	}
	since = since.Truncate(time.Second)
	return poll(ctx, kl, 200*time.Millisecond, func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type != corev1.NodeReady {
				continue
			}
			if cond.Status != corev1.ConditionTrue {
				return fmt.Errorf("node %s Ready=%s: %s", NodeName, cond.Status, cond.Message)
			}
			if cond.LastHeartbeatTime.Time.Before(since) {
				return fmt.Errorf("node %s: last heartbeat %s is from before the kubelet restart", NodeName, cond.LastHeartbeatTime)
			}
			return nil
		}
		return fmt.Errorf("node %s has no Ready condition yet", NodeName)
	})
}

// RestartKubelet stops the kubelet (SIGTERM, then SIGKILL) and starts it
// again with the same settings; pods and containerd keep running. It returns
// once the new kubelet is healthy and has reported the Node Ready.
func (c *Cluster) RestartKubelet(ctx context.Context) error {
	if c.node == nil {
		return errors.New("cluster: no node (Options.Node)")
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
	}
	t0 := time.Now()
	oldSock, _ := os.Stat(filepath.Join(c.DevicePluginDir, "kubelet.sock"))
	if err := c.stopProc("kubelet", 10*time.Second); err != nil {
		return err
	}
	if err := c.startKubelet(ctx, t0, oldSock); err != nil {
		return err
	}
	c.logf("cluster: kubelet restarted in %s", time.Since(t0).Round(time.Millisecond))
	return nil
}

// Ctr runs ctr against the node's containerd in the k8s.io namespace and
// returns its combined output.
func (c *Cluster) Ctr(ctx context.Context, args ...string) (string, error) {
	if c.ContainerdSocket == "" {
		return "", errors.New("cluster: no node (Options.Node)")
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	full := append([]string{"--address=" + c.ContainerdSocket, "--namespace=k8s.io"}, args...)
	out, err := exec.CommandContext(cctx, "ctr", full...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// ImportImage loads an image archive (OCI layout or `docker save` tar) into
// the node's containerd, where the kubelet sees it.
func (c *Cluster) ImportImage(ctx context.Context, archive string) error {
	if _, err := c.Ctr(ctx, "images", "import", archive); err != nil {
		return fmt.Errorf("cluster: importing %s: %w", archive, err)
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
		problems = append(problems, "a node needs root (kubelet, containerd, mounts, cgroups)")
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

func cniConflist(ipamDir string) string {
	b, _ := json.MarshalIndent(map[string]any{
		"cniVersion": "0.4.0",
		"name":       cniNetwork,
		"plugins": []any{map[string]any{
			"type":        "bridge",
			"bridge":      cniBridge,
			"isGateway":   true,
			"ipMasq":      false,
			"hairpinMode": true,
			"ipam": map[string]any{
				"type":    "host-local",
				"ranges":  [][]map[string]string{{{"subnet": podSubnet}}},
				"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
				"dataDir": ipamDir,
			},
		}},
	}, "", "  ")
	return string(b)
}

// containerdConfig keeps every path of containerd (root, state, sockets,
// runc's state) under the cluster's folder.
func containerdConfig(dir, ctrDir, wrapper string) string {
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
		cniBinDir, filepath.Join(dir, "cni", "net.d"))
}

// kubeletConfigYAML is a KubeletConfiguration for a throw-away test node on a
// cgroup v1 (or v2) host with a small disk: relaxed eviction and image GC,
// anonymous access with AlwaysAllow (so kubectl logs/exec work through the
// apiserver without kubelet client certificates).
func kubeletConfigYAML(criSocket, podLogs string, port, healthzPort int) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
containerRuntimeEndpoint: unix://%s
podLogsDir: %s
address: 0.0.0.0
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
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
`, criSocket, podLogs, port, healthzPort)
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
