// kemu-nodeagent is kemu's per-node agent (a DaemonSet). It runs the
// kubelet device plugins for /dev/kvm (only when the KVM probe booted a
// guest under KVM; the probe runs in the background), /dev/net/tun and
// /dev/vhost-net; the node heartbeat — labels kemu.dev/schedulable (true
// once the tun and vhost-net plugins are registered with the kubelet: VMs
// run under TCG; false on stop), kemu.dev/kvm (true once the probe said KVM
// works and the kvm plugin is registered) and the kemu.dev/heartbeat
// annotation; and the VMI controller of the node (nodeagent/vmi): it
// connects to the launchers of the VMIs whose status.nodeName is this node
// through their sockets under --kubelet-root (verified: no symlinks, a
// socket, a process of the launcher Pod, the VMI's UID), syncs them, mirrors their
// domains into VMI status and applies pause, soft reboot and deletion; and
// the migration proxy on --migration-addr with the node certificate it
// asks the controller for (nodeagent/migrationcert), and with that
// certificate the node agent's API for kemu-api on --api-addr
// (nodeagent/nodeapi: console, VNC, guest agent reports).
// /healthz and /metrics are served on --health-addr. See docs/nodeagent.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	"github.com/kemu-dev/kemu/api/validation"
	"github.com/kemu-dev/kemu/devices/deviceplugin"
	"github.com/kemu-dev/kemu/devices/kvm"
	"github.com/kemu-dev/kemu/kube/apirate"
	"github.com/kemu-dev/kemu/kube/migrationca"
	"github.com/kemu-dev/kemu/kube/nodeapi"
	"github.com/kemu-dev/kemu/launcher/cmdline"
	"github.com/kemu-dev/kemu/nodeagent/heartbeat"
	"github.com/kemu-dev/kemu/nodeagent/hostdisk"
	nodemetrics "github.com/kemu-dev/kemu/nodeagent/metrics"
	"github.com/kemu-dev/kemu/nodeagent/migrationcert"
	"github.com/kemu-dev/kemu/nodeagent/migrationproxy"
	agentapi "github.com/kemu-dev/kemu/nodeagent/nodeapi"
	"github.com/kemu-dev/kemu/nodeagent/seccomp"
	"github.com/kemu-dev/kemu/nodeagent/vmi"
)

var version = "dev"

func main() { os.Exit(run()) }

func run() int {
	var (
		nodeName, kubeconfig, kubeletRoot, pluginDir, probeKernel, probeInitrd, probeCache, qemu, healthAddr string
		interval                                                                                             time.Duration
		slots, workers                                                                                       int
	)
	fs := flag.NewFlagSet("kemu-nodeagent", flag.ContinueOnError)
	fs.StringVar(&nodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	fs.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster config)")
	fs.StringVar(&kubeletRoot, "kubelet-root", "/var/lib/kubelet", "the kubelet's --root-dir")
	fs.StringVar(&pluginDir, "device-plugin-dir", "", "the kubelet's device-plugin directory (default <kubelet-root>/device-plugins)")
	fs.IntVar(&slots, "device-slots", 1000, "shareable slots advertised per device")
	fs.StringVar(&qemu, "qemu", "qemu-system-x86_64", "QEMU binary for the KVM probe")
	fs.StringVar(&probeKernel, "probe-kernel", "/usr/share/kemu/probe/vmlinuz", "kernel of the KVM probe guest")
	fs.StringVar(&probeInitrd, "probe-initrd", "/usr/share/kemu/probe/initrd.img", "initramfs of the KVM probe guest")
	fs.StringVar(&probeCache, "probe-cache", "/var/lib/kemu/kvm-probe.json", "where the KVM probe's verdict is cached")
	fs.DurationVar(&interval, "heartbeat-interval", heartbeat.DefaultInterval, "time between heartbeats (jittered by 20%)")
	fs.StringVar(&healthAddr, "health-addr", ":8185", "address of /healthz and /metrics (empty: none)")
	fs.IntVar(&workers, "vmi-workers", 2, "VMIs reconciled in parallel")
	var apiRate apirate.Limits
	apiRate.Bind(fs)
	var migrationAddr, migrationAdvertise, systemNamespace string
	fs.StringVar(&migrationAddr, "migration-addr", migrationproxy.DefaultAddr, "address of the migration proxy (TLS 1.3, mutual; its node certificate comes from the controller's signer "+migrationca.SignerName+")")
	fs.StringVar(&migrationAdvertise, "migration-advertise-address", os.Getenv("POD_IP"), "the address other nodes' agents reach this node's migration proxy at (default $POD_IP)")
	var apiAddr string
	fs.StringVar(&apiAddr, "api-addr", ":"+strconv.Itoa(nodeapi.DefaultPort), "address of the node agent's API for kemu-api (console, VNC, guest agent; TLS 1.3 with the node certificate, kemu-api's client certificate required; empty: none)")
	fs.StringVar(&systemNamespace, "system-namespace", "kemu-system", "kemu's namespace, holding the migration CA bundle (ConfigMap "+migrationca.ConfigMapName+")")
	var hostDiskDirsFlag, hostRoot string
	fs.StringVar(&hostRoot, "host-root", hostdisk.DefaultHostRoot, "the host's / as this process sees it (hostDisks are resolved there)")
	fs.StringVar(&hostDiskDirsFlag, "host-disk-dirs", "", "node directories hostDisks may live under, comma-separated (kemu-config "+validation.HostDiskDirsKey+"); each VMI's hostDisks are checked on the host before its VM starts")
	klog.InitFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	defer klog.Flush()
	hostDiskDirs, err := validation.ParseHostDiskDirs(hostDiskDirsFlag)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kemu-nodeagent: --host-disk-dirs:", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "kemu-nodeagent: unexpected arguments %v\n", fs.Args())
		return 2
	}
	if nodeName == "" {
		fmt.Fprintln(os.Stderr, "kemu-nodeagent: --node-name (or $NODE_NAME) is required")
		return 2
	}
	if slots < 1 {
		fmt.Fprintf(os.Stderr, "kemu-nodeagent: --device-slots %d: must be at least 1\n", slots)
		return 2
	}
	if workers < 1 {
		fmt.Fprintf(os.Stderr, "kemu-nodeagent: --vmi-workers %d: must be at least 1\n", workers)
		return 2
	}
	if err := apiRate.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "kemu-nodeagent:", err)
		return 2
	}
	if pluginDir == "" {
		pluginDir = filepath.Join(kubeletRoot, "device-plugins")
	}
	// Before anything can mark the node schedulable: a launcher Pod with
	// passt names this profile, and the kubelet fails its container
	// without it.
	profile, err := seccomp.Install(kubeletRoot)
	if err != nil {
		klog.ErrorS(err, "Installing the passt launcher's seccomp profile")
		return 1
	}
	klog.InfoS("Seccomp profile installed", "path", profile, "from", seccomp.Source())
	cfg, err := restConfig(kubeconfig)
	if err != nil {
		klog.ErrorS(err, "Kubernetes client configuration")
		return 2
	}
	apiRate.Apply(cfg)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		klog.ErrorS(err, "Kubernetes client")
		return 2
	}
	kemuClient, err := versioned.NewForConfig(cfg)
	if err != nil {
		klog.ErrorS(err, "kemu client")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// Events on this node's VMIs (a refused launcher). Not stopped on
	// SIGTERM: the last ones should still go out.
	recorder, stopRecorder, err := vmi.NewRecorder(context.WithoutCancel(ctx), client, nodeName)
	if err != nil {
		klog.ErrorS(err, "Event recorder")
		return 2
	}
	defer stopRecorder()
	// The migration proxy: it listens once the controller signed this
	// node's certificate and renews it. The VMI reconcile registers
	// incoming migrations on it and opens outgoing ones through it (it
	// answers migrationcert.ErrNotReady before the first certificate).
	migration, err := migrationcert.NewProxy(migrationcert.Config{Client: client, NodeName: nodeName, Namespace: systemNamespace}, migrationAddr)
	if err != nil {
		klog.ErrorS(err, "Migration proxy")
		return 2
	}
	migrationPort, err := portOf(migrationAddr)
	if err != nil {
		klog.ErrorS(err, "Migration proxy address: --migration-addr needs a port", "addr", migrationAddr)
		return 2
	}
	vcfg := vmi.Config{KubeClient: client, KemuClient: kemuClient, NodeName: nodeName, KubeletRoot: kubeletRoot, HostDiskDirs: hostDiskDirs, HostRoot: hostRoot,
		Recorder: recorder}
	if migrationAdvertise != "" {
		vcfg.Migrations, vcfg.MigrationAddress, vcfg.MigrationPort = migration, migrationAdvertise, migrationPort
	} else {
		// Outside a Pod with the downward API's $POD_IP and without the
		// flag: this node neither takes nor sends migrations.
		klog.InfoS("No --migration-advertise-address and no $POD_IP: live migration to and from this node is off")
	}
	vmis, err := vmi.New(vcfg)
	if err != nil {
		klog.ErrorS(err, "VMI controller")
		return 2
	}
	// Per-VMI metrics on /metrics, from the launchers on each scrape.
	vmiMetrics, err := nodemetrics.New(nodemetrics.Config{Node: nodeName, Targets: nodemetrics.TargetsOf(vmis)})
	if err == nil {
		err = vmi.Registry.Register(vmiMetrics)
	}
	if err != nil {
		klog.ErrorS(err, "VMI metrics")
		return 2
	}
	klog.InfoS("kemu-nodeagent starting", "version", version, "node", nodeName, "devicePluginDir", pluginDir, "kubeletRoot", kubeletRoot)

	// The probe runs once per process (its verdict is also cached on disk
	// with the kernel and QEMU versions), in the kvm plugin's first health
	// check: in the background, so it does not hold the node back (the kvm
	// plugin is Optional; until it is registered the node runs VMs under
	// TCG). A cached verdict returns at once.
	probe := sync.OnceValue(func() bool {
		start := time.Now()
		v := kvm.Probe(ctx, kvm.Options{QEMU: qemu, Kernel: probeKernel, Initrd: probeInitrd, CacheFile: probeCache})
		klog.InfoS("KVM probe", "usable", v.Usable, "reason", v.Reason, "cached", v.Cached, "took", time.Since(start).Round(time.Millisecond))
		return v.Usable
	})
	kvmPlugin := deviceplugin.KVM(pluginDir, probe)
	plugins := &deviceplugin.Manager{Plugins: []*deviceplugin.Plugin{
		kvmPlugin, deviceplugin.Tun(pluginDir), deviceplugin.VhostNet(pluginDir),
	}}
	for _, p := range plugins.Plugins {
		p.Slots = slots
	}
	if err := plugins.Start(ctx); err != nil {
		klog.ErrorS(err, "Device plugins")
		return 2
	}
	// kemu.dev/schedulable=true as last written: /healthz (the DaemonSet's
	// readiness) means "this node accepts VMIs".
	var schedulable atomic.Bool
	if healthAddr != "" {
		if err := serveHealth(ctx, healthAddr, plugins, &schedulable); err != nil {
			klog.ErrorS(err, "Health endpoint")
			_ = plugins.Stop()
			return 1
		}
	}
	// The VMI controller does not gate the rest: it waits for the CRDs and
	// its caches on its own; launchers keep running when it stops.
	vmiErr := make(chan error, 1)
	go func() { vmiErr <- vmis.Run(ctx, workers) }()
	migrationErr := make(chan error, 1)
	go func() {
		err := migration.Run(ctx)
		if err != nil {
			klog.ErrorS(err, "Migration proxy stopped")
		}
		migrationErr <- err
	}()
	apiErr := make(chan error, 1)
	go func() { apiErr <- serveAPI(ctx, apiAddr, migration, vmis) }()
	hbErr := heartbeat.Run(ctx, heartbeat.Config{Client: client, NodeName: nodeName, Interval: interval,
		KVM: func(context.Context) bool { return kvmReady(kvmPlugin) }, Ready: plugins.Ready, Written: schedulable.Store,
		MachineTypes: machineTypes(ctx, qemu)})
	stop() // heartbeat.Run also returns early on a bad configuration
	err = errors.Join(hbErr, plugins.Stop(), <-vmiErr, <-migrationErr, <-apiErr)
	if err != nil {
		klog.ErrorS(err, "kemu-nodeagent stopped with errors")
		return 1
	}
	klog.InfoS("kemu-nodeagent stopped")
	return 0
}

// kvmReady is the kemu.dev/kvm label: the probe said KVM works (the
// plugin's health) and the kubelet advertises devices.kemu.dev/kvm (the
// plugin is registered), so a launcher Pod asking for it can be placed. It
// never blocks: while the probe runs it is false.
func kvmReady(p *deviceplugin.Plugin) bool {
	return p.Healthy() && p.Registered()
}

// machineTypes are the machine types of the node's QEMU (the node agent's
// image carries the launcher's QEMU), for the node's machine type labels;
// nil (labels left alone) when QEMU cannot say.
func machineTypes(ctx context.Context, qemu string) []string {
	ms, err := cmdline.DetectMachines(ctx, qemu)
	if err != nil {
		klog.ErrorS(err, "Machine types of QEMU unknown: the node's machine type labels are left as they are")
		return nil
	}
	return slices.Sorted(maps.Keys(ms))
}

// serveAPI serves the node agent's API on addr (nothing when empty) once
// the node's certificate is issued, until ctx ends.
func serveAPI(ctx context.Context, addr string, migration *migrationcert.Proxy, vmis *vmi.Controller) error {
	if addr == "" {
		klog.InfoS("No --api-addr: kemu-api cannot reach this node's consoles and guest agents")
		return nil
	}
	select {
	case <-migration.Ready():
	case <-ctx.Done():
		return nil
	}
	srv, err := agentapi.Listen(ctx, addr, agentapi.Config{Store: migration.Store(), Launchers: vmis})
	if err != nil {
		klog.ErrorS(err, "Node API")
		return err
	}
	klog.InfoS("Node API listening", "addr", srv.Addr().String())
	<-ctx.Done()
	return srv.Close()
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	return rest.InClusterConfig()
}

// serveHealth answers /healthz: 200 while the node accepts VMIs — every
// device plugin of a healthy device (but the Optional kvm one) is registered
// with the kubelet and the heartbeat wrote kemu.dev/schedulable=true — 503
// otherwise; and /metrics (the VMI controller's and launcher connections'
// counters, Go and process metrics).
func serveHealth(ctx context.Context, addr string, plugins *deviceplugin.Manager, schedulable *atomic.Bool) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !plugins.Ready() {
			http.Error(w, "device plugins not registered with the kubelet", http.StatusServiceUnavailable)
			return
		}
		if !schedulable.Load() {
			http.Error(w, "node not labelled schedulable yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("/metrics", promhttp.HandlerFor(vmi.Registry, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	return nil
}

// portOf is the port of a listen address (host:port, :port).
func portOf(addr string) (int32, error) {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("port %q: want 1-65535", p)
	}
	return int32(n), nil
}
