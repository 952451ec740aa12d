package cluster

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	itv1beta1 "github.com/kemu-dev/kemu/api/instancetype/v1beta1"
)

const (
	// EnvBinDir names the folder holding etcd, kube-apiserver and kubectl.
	EnvBinDir = "KEMU_K8S_BIN"
	// EnvKeep, when "1", keeps the cluster's temp folder after Stop (logs, data).
	EnvKeep = "KEMU_CLUSTER_KEEP"
	// AdminUser is the user name of the static token (group system:masters).
	AdminUser = "admin"

	modulePath = "github.com/kemu-dev/kemu"
)

// Options configure Start. The zero value is a working default.
type Options struct {
	// BinDir holds the binaries. Default: $KEMU_K8S_BIN, else
	// <repo root>/_out/k8s/bin.
	BinDir string
	// ServiceAccountAdmission keeps the ServiceAccount admission plugin on.
	// It is disabled by default because without kube-controller-manager no
	// "default" ServiceAccount exists and every Pod would be rejected.
	ServiceAccountAdmission bool
	// ControllerManager also runs kube-controller-manager (service accounts,
	// garbage collection, namespace deletion, ...). Needs the
	// kube-controller-manager binary (hack/k8s/build.sh kube-controller-manager).
	ControllerManager bool
	// APIServerArgs are appended to kube-apiserver's flags (later flags win).
	APIServerArgs []string
	// EtcdArgs are appended to etcd's flags.
	EtcdArgs []string
	// ControllerManagerArgs are appended to kube-controller-manager's flags.
	ControllerManagerArgs []string
	// Multus puts Multus CNI's thin plugin (MultusBinary) in front of each
	// node's Pod network: the bridge conf stays the cluster network (the
	// same name, bridge and Pod addresses), and a Pod's
	// k8s.v1.cni.cncf.io/networks annotation adds the
	// NetworkAttachmentDefinitions it names (InstallNetworkAttachmentCRD).
	Multus bool
	// MultusBinary is Multus's thin plugin. Default: $KEMU_MULTUS_BIN, else
	// <repo root>/_out/multus/bin/multus (hack/multus/build.sh, make k8s).
	MultusBinary string
	// Node runs one node: Nodes 1.
	Node bool
	// Nodes is how many nodes to run (at most MaxNodes), each in its own
	// namespaces with Debian's containerd (with runc and the CNI bridge
	// plugin) and a kubelet, and kube-scheduler for all, with the pause and
	// busybox images imported (PauseImage, BusyboxImage). Nodes imply
	// ControllerManager and ServiceAccountAdmission. Needs root, the kubelet
	// and kube-scheduler binaries (make k8s) and the packages of
	// hack/install-deps.sh. One cluster with nodes runs per machine: Start
	// first waits for the flock on NodeLock, which the Cluster holds until
	// Stop.
	Nodes int
	// NodeLock is the lock file a node holds. Default DefaultNodeLock.
	NodeLock string
	// NodeLockTimeout bounds the wait for another test process's node to
	// stop; StartTimeout counts from when the lock is held. Default 30 min.
	NodeLockTimeout time.Duration
	// KubeletArgs are appended to the kubelet's flags.
	KubeletArgs []string
	// StaticCPUManager runs every node's kubelet with the static CPU
	// manager policy (cpuManagerPolicy: static): each container of a
	// Guaranteed Pod asking for whole CPUs gets CPUs of its own (its
	// cpuset), every other container runs on the rest. The policy needs a
	// CPU reservation: systemReserved cpu StaticCPUReservation, which the
	// CPU manager rounds up to whole CPUs kept from exclusive use (the
	// lowest: CPU 0) while allocatable CPU drops by that much only. Every
	// node's kubelet sees all of the host's CPUs, so each node can hand out
	// the same CPUs.
	StaticCPUManager bool
	// HugePages2Mi adds that many 2 MiB hugepages to the host's pool
	// (/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages) before the
	// kubelets start, so each node reports that hugepages-2Mi capacity
	// (every node sees the same host pool). Stop gives back what Start
	// added (a test process that dies leaves it in the node lock's record,
	// and the next start gives it back); pages someone else added to the
	// pool meanwhile stay.
	HugePages2Mi int
	// SchedulerArgs are appended to kube-scheduler's flags.
	SchedulerArgs []string
	// StartTimeout bounds Start (in addition to ctx). Default 90s, with
	// nodes 2 min plus 1 min per node.
	StartTimeout time.Duration
	// TempDir is the parent of the cluster's temp folder. Default os.TempDir().
	TempDir string
	// KeepDir keeps the temp folder after Stop or a failed Start. Also set by
	// KEMU_CLUSTER_KEEP=1.
	KeepDir bool
	// Logf, if set, receives progress messages (e.g. testing.T.Logf).
	Logf func(format string, args ...any)
}

// Cluster is a running control plane. It is safe for concurrent use.
type Cluster struct {
	// Config is an admin (system:masters) client config for the apiserver.
	// Use RESTConfig for a private copy.
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file for the same admin.
	Kubeconfig string
	// Host is the apiserver URL, e.g. https://127.0.0.1:41234.
	Host string
	// Token is the admin bearer token.
	Token string
	// CACert is the PEM CA that signed the apiserver's serving certificate.
	CACert []byte
	// EtcdURL is etcd's client URL.
	EtcdURL string
	// Dir is the cluster's temp folder (logs: <Dir>/<process>.log).
	Dir string
	// BinDir is where the binaries came from.
	BinDir string
	// StartupDuration is how long Start took until the apiserver was ready
	// (and the Node Ready, with a node), not counting NodeLockWait.
	StartupDuration time.Duration

	// The fields below are set with Options.Nodes (or Node).

	// Nodes are the cluster's nodes, in order.
	Nodes []*Node
	// NodeName is the first node's name.
	NodeName string
	// KubeletRootDir is the first node's kubelet root as the host sees it:
	// pod volumes are at <KubeletRootDir>/pods/<uid>/volumes/<plugin>/<volume>
	// (mounts the node made there are not: Node.ProcPath). Inside every node
	// it is KubeletRoot.
	KubeletRootDir string
	// DevicePluginDir is the first node's device-plugin folder as the host
	// sees it, holding the kubelet's registration socket kubelet.sock.
	DevicePluginDir string
	// PodLogsDir is the first node's Pod log folder as the host sees it.
	PodLogsDir string
	// ContainerdSocket is the first node's containerd (CRI) socket.
	ContainerdSocket string
	// NodeLockWait is how long Start waited for the node lock.
	NodeLockWait time.Duration
	// NodeStartupDuration is how long the nodes took from building the
	// images to the last Node being Ready.
	NodeStartupDuration time.Duration

	keep     bool
	logf     func(string, ...any)
	lock     *os.File   // the node lock, held until Stop
	host     *hostState // what Stop puts back
	mu       sync.Mutex
	procs    []*process // in start order
	stopOnce sync.Once
	stopErr  error
}

// Process describes one child process of the cluster.
type Process struct {
	Name    string
	Pid     int
	LogPath string
	Exited  bool
}

// Start brings up etcd and kube-apiserver (and kube-controller-manager if
// asked) and returns once /readyz answers 200 and the "default" namespace
// exists. ctx bounds the start only; the processes run until Stop (or until
// the test process dies).
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	t0 := time.Now()
	if opts.Node && opts.Nodes == 0 {
		opts.Nodes = 1
	}
	if opts.Nodes < 0 || opts.Nodes > MaxNodes {
		return nil, fmt.Errorf("cluster: %d nodes: between 0 and %d", opts.Nodes, MaxNodes)
	}
	withNodes := opts.Nodes > 0
	timeout := opts.StartTimeout
	if timeout <= 0 {
		timeout = 90 * time.Second
		if withNodes {
			timeout = 2*time.Minute + time.Duration(opts.Nodes)*time.Minute
		}
	}
	if withNodes {
		opts.ControllerManager, opts.ServiceAccountAdmission = true, true
	}
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}

	binDir, err := findBinDir(opts.BinDir)
	if err != nil {
		return nil, err
	}
	need := []string{"etcd", "kube-apiserver", "kubectl"}
	if opts.ControllerManager {
		need = append(need, "kube-controller-manager")
	}
	if withNodes {
		need = append(need, "kube-scheduler", "kubelet")
		need = append(need, ContainerdBinaries...)
	}
	var missing []string
	for _, b := range need {
		if fi, err := os.Stat(filepath.Join(binDir, b)); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		var components []string // hack/k8s/build.sh's: containerd builds all three
		for _, m := range missing {
			if slices.Contains(ContainerdBinaries, m) {
				m = "containerd"
			}
			if !slices.Contains(components, m) {
				components = append(components, m)
			}
		}
		return nil, fmt.Errorf("cluster: %s not found in %s: run make k8s or hack/k8s/build.sh %s (or set %s to a folder holding them)",
			strings.Join(missing, ", "), binDir, strings.Join(components, " "), EnvBinDir)
	}

	// Nodes: check the host, then wait for the machine's one node slot
	// before the start timeout begins.
	var lock *os.File
	var lockWait time.Duration
	if withNodes {
		if err := checkNodePrereqs(); err != nil {
			return nil, err
		}
		lockPath := opts.NodeLock
		if lockPath == "" {
			lockPath = DefaultNodeLock
		}
		lockTimeout := opts.NodeLockTimeout
		if lockTimeout <= 0 {
			lockTimeout = 30 * time.Minute
		}
		lock, lockWait, err = lockNode(ctx, lockPath, lockTimeout, logf)
		if err != nil {
			return nil, err
		}
		// A node whose test process died without Stop left its record.
		prev, err := loadHostState(lock)
		if err != nil {
			lock.Close()
			return nil, fmt.Errorf("cluster: node lock %s: %w", lockPath, err)
		}
		if prev != nil {
			logf("cluster: cleaning up after a node of pid %d that did not stop (%s)", prev.Owner, prev.Dir)
			if err := cleanupHost(prev); err != nil {
				// What was put back is off the record (hugepages).
				_ = saveHostState(lock, prev)
				lock.Close()
				return nil, err
			}
			if err := saveHostState(lock, nil); err != nil {
				lock.Close()
				return nil, fmt.Errorf("cluster: node lock %s: %w", lockPath, err)
			}
		}
		if err := foreignKubelet(); err != nil {
			lock.Close()
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	removeStaleDirs(opts.TempDir)
	dir, err := os.MkdirTemp(opts.TempDir, "kemu-cluster-")
	if err != nil {
		if lock != nil {
			lock.Close()
		}
		return nil, fmt.Errorf("cluster: %w", err)
	}
	// Marks the folder as ours so a later Start can remove it if this test
	// process dies without calling Stop.
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	c := &Cluster{
		Dir:    dir,
		BinDir: binDir,
		keep:   opts.KeepDir || os.Getenv(EnvKeep) == "1",
		logf:   logf,
		lock:   lock,
	}
	ok := false
	defer func() {
		if !ok {
			c.Stop()
		}
	}()
	bindIP := "127.0.0.1"
	if withNodes {
		c.NodeLockWait = lockWait
		var names []string
		for i := range opts.Nodes {
			n := newNode(c, i)
			c.Nodes = append(c.Nodes, n)
			names = append(names, n.Name)
		}
		first := c.Nodes[0]
		c.NodeName, c.ContainerdSocket = first.Name, first.ContainerdSocket
		c.KubeletRootDir, c.DevicePluginDir, c.PodLogsDir = first.KubeletRootDir(), first.DevicePluginDir(), first.HostPath(podLogsRoot)
		// The record names the bridge, veths and cgroups before they
		// exist, so that a test process that dies right after creating
		// them leaves them to clean up.
		c.host = captureHost(dir, names)
		if err := saveHostState(lock, c.host); err != nil {
			return nil, fmt.Errorf("cluster: node lock: %w", err)
		}
		if opts.HugePages2Mi > 0 {
			if err := reserveHugepages(lock, c.host, opts.HugePages2Mi); err != nil {
				return nil, err
			}
			logf("cluster: %d 2 MiB hugepages added to the host's pool", opts.HugePages2Mi)
		}
		if err := setupBridge(); err != nil {
			return nil, err
		}
		// The nodes reach the API server on the bridge.
		bindIP = bridgeIP
	}

	pk, err := writePKI(dir)
	if err != nil {
		return nil, fmt.Errorf("cluster: generating certificates: %w", err)
	}
	c.Token = pk.token
	c.CACert = pk.caCertPEM

	// Free ports are picked by binding :0 and closing; another process can
	// grab one in between, so a start that fails with "address already in
	// use" is retried with new ports.
	const attempts = 3
	for i := 1; ; i++ {
		err = c.startControlPlane(ctx, opts, pk, bindIP, i)
		if err == nil {
			break
		}
		if i >= attempts || !errors.Is(err, errAddrInUse) || ctx.Err() != nil {
			return nil, err
		}
		c.logf("cluster: port collision, retrying (%v)", err)
		c.stopProcesses()
	}

	c.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(c.Kubeconfig, kubeconfigYAML(c.Host, c.CACert, c.Token), 0o600); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	c.Config = &rest.Config{
		Host:            c.Host,
		BearerToken:     c.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.CACert},
		QPS:             100,
		Burst:           200,
	}

	if opts.ControllerManager {
		if err := c.startControllerManager(ctx, opts, pk); err != nil {
			return nil, err
		}
	}

	if withNodes {
		if err := c.startNodes(ctx, opts); err != nil {
			return nil, err
		}
	}

	c.StartupDuration = time.Since(t0) - c.NodeLockWait
	c.logf("cluster: ready at %s in %s (dir %s)", c.Host, c.StartupDuration.Round(time.Millisecond), dir)
	ok = true
	return c, nil
}

var errAddrInUse = errors.New("address already in use")

// startControlPlane starts etcd (on loopback) and kube-apiserver on bindIP.
func (c *Cluster) startControlPlane(ctx context.Context, opts Options, pk *pki, bindIP string, attempt int) error {
	ports, err := freePorts(3)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	clientPort, peerPort, securePort := ports[0], ports[1], ports[2]
	c.EtcdURL = fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	c.Host = fmt.Sprintf("https://%s", net.JoinHostPort(bindIP, strconv.Itoa(securePort)))
	suffix := ""
	if attempt > 1 {
		suffix = "-" + strconv.Itoa(attempt)
	}

	etcdArgs := []string{
		"--name=default",
		"--data-dir=" + filepath.Join(c.Dir, "etcd-data"+suffix),
		"--unsafe-no-fsync",
		"--listen-client-urls=" + c.EtcdURL,
		"--advertise-client-urls=" + c.EtcdURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=default=" + peerURL,
		"--initial-cluster-state=new",
	}
	etcdArgs = append(etcdArgs, opts.EtcdArgs...)
	etcd, err := c.start("etcd"+suffix, "etcd", etcdArgs)
	if err != nil {
		return err
	}
	if err := waitHTTP(ctx, etcd, http.DefaultClient, c.EtcdURL+"/health", nil, nil); err != nil {
		return c.procErr(etcd, "etcd did not become healthy", err)
	}

	admission := "--disable-admission-plugins=ServiceAccount"
	if opts.ServiceAccountAdmission {
		admission = "--enable-admission-plugins=ServiceAccount"
	}
	apiArgs := []string{
		"--etcd-servers=" + c.EtcdURL,
		"--bind-address=" + bindIP,
		"--advertise-address=" + bindIP,
		"--secure-port=" + strconv.Itoa(securePort),
		"--endpoint-reconciler-type=none",
		"--cert-dir=" + filepath.Join(c.Dir, "apiserver-certs"),
		"--tls-cert-file=" + pk.servingCert,
		"--tls-private-key-file=" + pk.servingKey,
		"--client-ca-file=" + pk.caCert,
		"--token-auth-file=" + pk.tokenFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + pk.saPub,
		"--service-account-signing-key-file=" + pk.saKey,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--allow-privileged=true",
		"--kubelet-preferred-address-types=InternalIP",
		// The aggregation layer (kemu-api's subresources.kemu.dev) and
		// webhooks reach Services through their endpoints: the host has
		// no kube-proxy, and it routes every node's Pod range.
		"--requestheader-client-ca-file=" + pk.frontProxyCA,
		"--requestheader-allowed-names=" + FrontProxyClientName,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + pk.proxyClientCert,
		"--proxy-client-key-file=" + pk.proxyClientKey,
		"--enable-aggregator-routing=true",
		admission,
	}
	apiArgs = append(apiArgs, opts.APIServerArgs...)
	api, err := c.start("kube-apiserver"+suffix, "kube-apiserver", apiArgs)
	if err != nil {
		return err
	}

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.CACert)
	hc := &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			Proxy:           nil,
			TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		},
	}
	hdr := http.Header{"Authorization": {"Bearer " + c.Token}}
	if err := waitHTTP(ctx, api, hc, c.Host+"/readyz", hdr, etcd); err != nil {
		return c.procErr(api, "kube-apiserver did not become ready", err)
	}
	// /readyz can answer before the bootstrap controller has created the
	// system namespaces; tests expect "default" to exist.
	if err := waitHTTP(ctx, api, hc, c.Host+"/api/v1/namespaces/default", hdr, etcd); err != nil {
		return c.procErr(api, "namespace default did not appear", err)
	}
	return nil
}

func (c *Cluster) startControllerManager(ctx context.Context, opts Options, pk *pki) error {
	args := []string{
		"--kubeconfig=" + c.Kubeconfig,
		"--service-account-private-key-file=" + pk.saKey,
		"--root-ca-file=" + pk.caCert,
		"--controllers=*,-nodeipam",
		"--leader-elect=false",
		"--secure-port=0",
		"--use-service-account-credentials=false",
	}
	args = append(args, opts.ControllerManagerArgs...)
	kcm, err := c.start("kube-controller-manager", "kube-controller-manager", args)
	if err != nil {
		return err
	}
	// Ready once it has created the "default" ServiceAccount.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.CACert)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	hdr := http.Header{"Authorization": {"Bearer " + c.Token}}
	if err := waitHTTP(ctx, kcm, hc, c.Host+"/api/v1/namespaces/default/serviceaccounts/default", hdr, nil); err != nil {
		return c.procErr(kcm, "kube-controller-manager did not create the default ServiceAccount", err)
	}
	return nil
}

// start launches a binary from BinDir (or bin itself when it is an absolute
// path), logging to <Dir>/<name>.log.
func (c *Cluster) start(name, bin string, args []string) (*process, error) {
	return c.startEnv(name, bin, args, nil)
}

// startEnv is start with variables added to the environment.
func (c *Cluster) startEnv(name, bin string, args, extraEnv []string) (*process, error) {
	env := append(os.Environ(), extraEnv...)
	if !filepath.IsAbs(bin) {
		bin = filepath.Join(c.BinDir, bin)
	}
	p, err := startProcess(name, bin, args, c.Dir, filepath.Join(c.Dir, name+".log"), env)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	c.logf("cluster: started %s pid %d", name, p.pid())
	return p, nil
}

// procErr wraps err with the last log lines of p (and every other process
// that has exited), and maps port collisions to errAddrInUse.
func (c *Cluster) procErr(p *process, what string, err error) error {
	var b strings.Builder
	fmt.Fprintf(&b, "cluster: %s: %v", what, err)
	tails := []*process{p}
	c.mu.Lock()
	for _, q := range c.procs {
		if q != p && q.exited() {
			tails = append(tails, q)
		}
	}
	c.mu.Unlock()
	inUse := false
	for _, q := range tails {
		t := q.tail(25)
		if strings.Contains(t, "address already in use") {
			inUse = true
		}
		fmt.Fprintf(&b, "\n--- last lines of %s ---\n%s", q.logPath, t)
	}
	if inUse {
		return fmt.Errorf("%s: %w", b.String(), errAddrInUse)
	}
	return errors.New(b.String())
}

// waitHTTP polls url until it answers 200, p exits, also (if non-nil) exits,
// or ctx ends.
func waitHTTP(ctx context.Context, p *process, hc *http.Client, url string, hdr http.Header, also *process) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last string
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		for k, v := range hdr {
			req.Header[k] = v
		}
		resp, err := hc.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%s: %d %s", url, resp.StatusCode, lastLines(body, 8))
		} else {
			last = err.Error()
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited (%v); last probe: %s", p.name, p.waitErr, last)
		case <-ctx.Done():
			return fmt.Errorf("%w; last probe: %s", ctx.Err(), last)
		case <-tick.C:
		}
		if also != nil && also.exited() {
			return fmt.Errorf("%s exited (%v); last probe: %s", also.name, also.waitErr, last)
		}
	}
}

func lastLines(b []byte, n int) string {
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasSuffix(l, " ok") {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "; ")
}

// RESTConfig returns a copy of the admin client config.
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.Config) }

// Kubectl runs the built kubectl against the cluster and returns its stdout
// and stderr. A non-zero exit is an error that includes stderr.
func (c *Cluster) Kubectl(args ...string) (stdout, stderr string, err error) {
	return c.KubectlContext(context.Background(), nil, args...)
}

// KubectlInput is Kubectl with stdin (e.g. "apply", "-f", "-").
func (c *Cluster) KubectlInput(stdin string, args ...string) (stdout, stderr string, err error) {
	return c.KubectlContext(context.Background(), strings.NewReader(stdin), args...)
}

// KubectlContext is Kubectl with a context and optional stdin. Without a
// deadline in ctx, the command is limited to two minutes.
func (c *Cluster) KubectlContext(ctx context.Context, stdin io.Reader, args ...string) (stdout, stderr string, err error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
	}
	full := append([]string{"--kubeconfig=" + c.Kubeconfig, "--cache-dir=" + filepath.Join(c.Dir, "kubectl-cache")}, args...)
	cmd := exec.CommandContext(ctx, filepath.Join(c.BinDir, "kubectl"), full...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr, cmd.Stdin = &out, &errb, stdin
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig)
	err = cmd.Run()
	if err != nil {
		err = fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), errb.String(), err
}

// Processes lists the cluster's child processes in start order.
func (c *Cluster) Processes() []Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Process, 0, len(c.procs))
	for _, p := range c.procs {
		out = append(out, Process{Name: p.name, Pid: p.pid(), LogPath: p.logPath, Exited: p.exited()})
	}
	return out
}

// RSS returns the resident set size in bytes of each running process, by name
// (Linux only; empty elsewhere).
func (c *Cluster) RSS() map[string]int64 {
	m := map[string]int64{}
	for _, p := range c.Processes() {
		if !p.Exited {
			if r := rssBytes(p.Pid); r > 0 {
				m[p.Name] = r
			}
		}
	}
	return m
}

// Logs returns the last n lines (at most the last 64 KiB) of a process's log
// ("etcd", "kube-apiserver", "kube-controller-manager"; with nodes also
// "kube-scheduler", and "kubelet", "containerd" or "netns" of the first
// node, or of any node as "<node>/kubelet" — a restarted kubelet appends to
// its log after a "+ <command line>" line).
func (c *Cluster) Logs(name string, n int) string {
	p := filepath.Join(c.Dir, name+".log")
	if _, err := os.Stat(p); err != nil && len(c.Nodes) > 0 {
		return c.Nodes[0].Logs(name, n)
	}
	return tailFile(p, n)
}

// Stop kills every process of the cluster (SIGTERM to its process group, then
// SIGKILL after a short grace period), waits for them, and removes the temp
// folder unless it is kept. Stop is idempotent.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		c.stopErr = errors.Join(c.stopNodes(), c.stopProcesses())
		if c.keep {
			_ = os.WriteFile(filepath.Join(c.Dir, keepFile), nil, 0o644)
			c.logf("cluster: kept %s", c.Dir)
			return
		}
		// Never remove through a mount (a pod volume could bind a host
		// folder): the node cleanup has unmounted everything, or failed.
		if m := MountsUnder(c.Dir); len(m) > 0 {
			c.stopErr = errors.Join(c.stopErr, fmt.Errorf("cluster: %s not removed, still mounted: %v", c.Dir, m))
			return
		}
		if err := os.RemoveAll(c.Dir); err != nil && c.stopErr == nil {
			c.stopErr = err
		}
	})
	return c.stopErr
}

// stopProcesses stops the children in reverse start order.
func (c *Cluster) stopProcesses() error {
	c.mu.Lock()
	procs := c.procs
	c.procs = nil
	c.mu.Unlock()
	var errs []error
	for i := len(procs) - 1; i >= 0; i-- {
		if err := procs[i].stop(5 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

const (
	ownerFile = "owner.pid"
	keepFile  = "keep"
)

// removeStaleDirs deletes kemu-cluster-* folders left by test processes that
// died without Stop (their children died with them: see sysProcAttr).
func removeStaleDirs(parent string) {
	if parent == "" {
		parent = os.TempDir()
	}
	dirs, _ := filepath.Glob(filepath.Join(parent, "kemu-cluster-*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || processAlive(pid) {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, keepFile)); err == nil {
			continue
		}
		// A dead node's mounts are the next node start's to clean up
		// (cleanupHost); never remove through them.
		if len(MountsUnder(d)) > 0 {
			continue
		}
		os.RemoveAll(d)
	}
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func kubeconfigYAML(host string, ca []byte, token string) []byte {
	return []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kemu-test
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: kemu-test
  context:
    cluster: kemu-test
    user: %s
    namespace: default
current-context: kemu-test
`, host, base64.StdEncoding.EncodeToString(ca), AdminUser, token, AdminUser))
}

// findBinDir resolves the binary folder: explicit, $KEMU_K8S_BIN, or
// <repo root>/_out/k8s/bin.
func findBinDir(explicit string) (string, error) {
	if explicit != "" {
		return filepath.Abs(explicit)
	}
	if d := os.Getenv(EnvBinDir); d != "" {
		return filepath.Abs(d)
	}
	root, err := RepoRoot()
	if err != nil {
		return "", fmt.Errorf("cluster: %v; set %s to a folder holding etcd, kube-apiserver and kubectl (built by hack/k8s/build.sh)", err, EnvBinDir)
	}
	return filepath.Join(root, "_out", "k8s", "bin"), nil
}

// RepoRoot walks up from the working directory to the folder whose go.mod
// declares module github.com/kemu-dev/kemu.
func RepoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && moduleOf(b) == modulePath {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("no go.mod of module %s above %s", modulePath, wd)
		}
		d = parent
	}
}

func moduleOf(gomod []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`)
		}
	}
	return ""
}

// InstallCRDs applies kemu's CRDs (<repo root>/deploy/base/crd, as a user would
// with kubectl) and waits until they are Established.
func (c *Cluster) InstallCRDs() error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	if _, stderr, err := c.Kubectl("apply", "-f", filepath.Join(root, "deploy", "base", "crd")); err != nil {
		return fmt.Errorf("installing kemu's CRDs: %w: %s", err, stderr)
	}
	if _, stderr, err := c.Kubectl("wait", "--for=condition=Established", "--timeout=60s",
		"crd/virtualmachineinstances.kemu.dev", "crd/virtualmachines.kemu.dev",
		"crd/virtualmachineinstancemigrations.kemu.dev",
		"crd/"+itv1beta1.Resource(itv1beta1.ResourceInstancetypes).String(),
		"crd/"+itv1beta1.Resource(itv1beta1.ResourceClusterInstancetypes).String(),
		"crd/"+itv1beta1.Resource(itv1beta1.ResourcePreferences).String(),
		"crd/"+itv1beta1.Resource(itv1beta1.ResourceClusterPreferences).String()); err != nil {
		return fmt.Errorf("waiting for kemu's CRDs: %w: %s", err, stderr)
	}
	return nil
}
