// kemu-controller runs kemu's cluster-wide controllers (VMI, VM, node, migration, evacuation, the migration certificate signer) under leader election (a coordination.k8s.io Lease), with
// /healthz, /readyz and /metrics on --metrics-addr. SIGTERM/SIGINT stop the
// controllers, release the Lease and exit 0.
//
// Controllers are listed in one place, controllers() below: each is built
// with New(...) from the shared informers and run with Run(ctx, workers).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	"github.com/kemu-dev/kemu/api/validation"
	"github.com/kemu-dev/kemu/controller"
	"github.com/kemu-dev/kemu/controller/evacuation"
	"github.com/kemu-dev/kemu/controller/metrics"
	"github.com/kemu-dev/kemu/controller/migration"
	"github.com/kemu-dev/kemu/controller/migrationcert"
	"github.com/kemu-dev/kemu/controller/node"
	"github.com/kemu-dev/kemu/controller/template"
	"github.com/kemu-dev/kemu/controller/vm"
	"github.com/kemu-dev/kemu/controller/vmi"
	"github.com/kemu-dev/kemu/kube/apirate"
	"github.com/kemu-dev/kemu/kube/events"
	"github.com/kemu-dev/kemu/kube/migrationca"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

type options struct {
	kubeconfig, namespace, launcherImage, launcherPullPolicy, kvm, metricsAddr string
	hostDiskDirs                                                               []string
	leaseNamespace, leaseName, identity                                        string
	// systemNamespace is kemu's own namespace: the migration CA's Secret
	// and ConfigMap, the node agent's ServiceAccount.
	systemNamespace string
	leaderElect     bool
	// imageVolumes: containerDisks and kernel-boot images as Kubernetes
	// image volumes instead of init-container copies.
	imageVolumes bool
	// backendStorage: the claims of persistent TPMs.
	backendStorage                                    vmi.BackendStorage
	leaseDuration, renewDeadline, retryPeriod, resync time.Duration
	nodeHeartbeatTimeout                              time.Duration
	migration                                         migrationOptions
	workers                                           int
	apiRate                                           apirate.Limits
	// listening, if set, receives the metrics server address (tests).
	listening func(addr string)
}

func main() { os.Exit(run()) }

func run() int {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "kemu-controller:", err)
		return 2
	}
	defer klog.Flush()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := serve(ctx, o); err != nil {
		klog.ErrorS(err, "kemu-controller failed")
		return 1
	}
	klog.InfoS("kemu-controller stopped")
	return 0
}

// parseFlags reads the flags (and klog's) into options.
func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("kemu-controller", flag.ContinueOnError)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster config)")
	fs.StringVar(&o.namespace, "namespace", "", "watch only this namespace (default: all)")
	fs.StringVar(&o.launcherImage, "launcher-image", "", "image running kemu-launcher and holding kemu-copy (required)")
	fs.StringVar(&o.launcherPullPolicy, "launcher-pull-policy", "", "pull policy of the launcher image (default: Kubernetes')")
	fs.StringVar(&o.kvm, "kvm", string(vmi.KVMAuto), "when launcher Pods request devices.kemu.dev/kvm: auto, always, never")
	fs.BoolVar(&o.imageVolumes, "image-volumes", false, "mount containerDisk and kernel-boot images into launcher Pods as Kubernetes image volumes (the container runtime must support them: containerd 2.1+, CRI-O 1.31+) instead of copying them out with init containers")
	var hostDiskDirs string
	fs.StringVar(&hostDiskDirs, "host-disk-dirs", "", "node directories hostDisks may live under, comma-separated (kemu-config "+validation.HostDiskDirsKey+"); empty: every hostDisk is refused")
	fs.IntVar(&o.workers, "workers", 4, "workers per controller")
	fs.StringVar(&o.backendStorage.StorageClass, "vm-state-storage-class", "",
		"storage class of the VMs' backend storage claims (persistent TPM state; kemu-config vmStateStorageClass, KubeVirt's vmStateStorageClass); empty: the cluster's default class")
	var accessMode string
	fs.StringVar(&accessMode, "vm-state-access-mode", "",
		"access mode of the VMs' backend storage claims: ReadWriteOnce, ReadWriteMany or ReadWriteOncePod (kemu-config vmStateAccessMode); empty: ReadWriteMany with --vm-state-storage-class, else ReadWriteOnce (KubeVirt's rule without storage profiles)")
	fs.StringVar(&o.metricsAddr, "metrics-addr", ":8080", "address of /metrics, /healthz and /readyz (\"0\" disables)")
	fs.StringVar(&o.systemNamespace, "system-namespace", "kemu-system", "kemu's namespace: the migration CA (Secret "+migrationca.SecretName+", ConfigMap "+migrationca.ConfigMapName+") and the node agent's ServiceAccount")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "run only while holding the Lease")
	fs.StringVar(&o.leaseNamespace, "leader-elect-namespace", "kemu-system", "namespace of the Lease")
	fs.StringVar(&o.leaseName, "leader-elect-name", "kemu-controller", "name of the Lease")
	fs.StringVar(&o.identity, "leader-elect-identity", "", "holder identity (default: hostname_<random>)")
	fs.DurationVar(&o.leaseDuration, "leader-elect-lease-duration", 15*time.Second, "Lease duration")
	fs.DurationVar(&o.renewDeadline, "leader-elect-renew-deadline", 10*time.Second, "renew deadline")
	fs.DurationVar(&o.retryPeriod, "leader-elect-retry-period", 2*time.Second, "retry period")
	fs.DurationVar(&o.resync, "resync", 10*time.Minute, "informer resync period")
	fs.DurationVar(&o.nodeHeartbeatTimeout, "node-heartbeat-timeout", node.DefaultHeartbeatTimeout,
		"age of a node agent's heartbeat after which its node is labelled unschedulable and its VMIs without launcher Pods fail")
	o.apiRate.Bind(fs)
	bindMigrationFlags(fs, &o.migration)
	klog.InitFlags(fs)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	if o.launcherImage == "" {
		return o, errors.New("--launcher-image is required")
	}
	if err := o.apiRate.Validate(); err != nil {
		return o, err
	}
	switch vmi.KVMPolicy(o.kvm) {
	case vmi.KVMAuto, vmi.KVMAlways, vmi.KVMNever:
	default:
		return o, fmt.Errorf("--kvm %q: want auto, always or never", o.kvm)
	}
	var err error
	if o.hostDiskDirs, err = validation.ParseHostDiskDirs(hostDiskDirs); err != nil {
		return o, fmt.Errorf("--host-disk-dirs: %w", err)
	}
	switch m := corev1.PersistentVolumeAccessMode(accessMode); m {
	case "", corev1.ReadWriteOnce, corev1.ReadWriteMany, corev1.ReadWriteOncePod:
		o.backendStorage.AccessMode = m
	default:
		return o, fmt.Errorf("--vm-state-access-mode %q: want ReadWriteOnce, ReadWriteMany or ReadWriteOncePod", accessMode)
	}
	if o.workers < 1 {
		return o, errors.New("--workers must be at least 1")
	}
	if o.nodeHeartbeatTimeout <= 0 {
		return o, fmt.Errorf("--node-heartbeat-timeout %s: must be positive", o.nodeHeartbeatTimeout)
	}
	if err := o.migration.validate(); err != nil {
		return o, err
	}
	return o, nil
}

func restConfig(o options) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if o.kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, err
	}
	o.apiRate.Apply(cfg)
	cfg.UserAgent = "kemu-controller/" + version
	return cfg, nil
}

func serve(ctx context.Context, o options) error {
	cfg, err := restConfig(o)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	kemu, err := versioned.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	metrics.Register()
	var ready atomic.Bool
	if o.metricsAddr != "0" {
		srv, addr, err := startHTTP(o.metricsAddr, &ready)
		if err != nil {
			return err
		}
		if o.listening != nil {
			o.listening(addr)
		}
		defer srv.Shutdown(context.Background()) //nolint:errcheck // best effort at exit
	}

	recorder, stopRecorder, err := events.NewRecorder(ctx, kube, "kemu-controller")
	if err != nil {
		return err
	}
	defer stopRecorder()

	runControllers := func(ctx context.Context) error {
		inf := controller.NewInformers(kube, kemu, o.namespace, o.resync)
		inf.WatchDataVolumes(kube, dyn, 0)
		cs, err := controllers(o, kube, kemu, inf, recorder)
		if err != nil {
			return err
		}
		vmiInformer := inf.Kemu.Kemu().V1alpha1().VirtualMachineInstances()
		defer metrics.VMIPhases.Set(vmiInformer.Lister(), vmiInformer.Informer().HasSynced)()
		inf.Start(ctx)
		defer inf.Shutdown()
		ready.Store(true)
		defer ready.Store(false)
		var wg sync.WaitGroup
		errs := make([]error, len(cs))
		for i, c := range cs {
			wg.Go(func() {
				err := c.Run(ctx, o.workers)
				if err != nil && ctx.Err() != nil {
					// Its caches never synced because the stop came first
					// (a controller waits for them only until ctx ends):
					// a shutdown, not a failure.
					klog.InfoS("Controller stopped before its caches synced", "err", err)
					err = nil
				}
				errs[i] = err
			})
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	if !o.leaderElect {
		return runControllers(ctx)
	}
	return leaderElect(ctx, o, cfg, runControllers)
}

// controllers builds every controller of the process: add new ones here.
func controllers(o options, kube kubernetes.Interface, kemu versioned.Interface, inf *controller.Informers,
	recorder record.EventRecorder) ([]controller.Runnable, error) {
	tmpl := template.NewService(template.Options{LauncherImage: o.launcherImage,
		LauncherPullPolicy: corev1.PullPolicy(o.launcherPullPolicy), HostDiskDirs: o.hostDiskDirs, ImageVolumes: o.imageVolumes})
	vmic, err := vmi.New(vmi.Config{
		KubeClient: kube, KemuClient: kemu,
		VMIInformer:  inf.Kemu.Kemu().V1alpha1().VirtualMachineInstances(),
		PodInformer:  inf.LauncherPods.Core().V1().Pods(),
		NodeInformer: inf.Kube.Core().V1().Nodes(),
		PVCInformer:  inf.Kube.Core().V1().PersistentVolumeClaims(),
		Template:     tmpl, Recorder: recorder, KVM: vmi.KVMPolicy(o.kvm),
		DataVolumes: inf.DataVolumes, BackendStorage: o.backendStorage,
	})
	if err != nil {
		return nil, err
	}
	vmc, err := vm.New(kube, kemu, inf.Kube, inf.Kemu, recorder, vm.Options{DataVolumes: inf.DataVolumes})
	if err != nil {
		return nil, err
	}
	nodec, err := node.New(kube, kemu, inf.Kube, inf.Kemu, recorder, node.Options{HeartbeatTimeout: o.nodeHeartbeatTimeout})
	if err != nil {
		return nil, err
	}
	migc, err := migration.New(o.migration.config(migration.Config{
		KubeClient: kube, KemuClient: kemu,
		MigrationInformer: inf.Kemu.Kemu().V1alpha1().VirtualMachineInstanceMigrations(),
		VMIInformer:       inf.Kemu.Kemu().V1alpha1().VirtualMachineInstances(),
		PodInformer:       inf.LauncherPods.Core().V1().Pods(),
		Template:          tmpl, Recorder: recorder,
	}))
	if err != nil {
		return nil, err
	}
	certc, err := migrationcert.New(migrationcert.Config{Client: kube, Namespace: o.systemNamespace, Resync: o.resync})
	if err != nil {
		return nil, err
	}
	evacc, err := evacuation.New(kube, kemu, inf.Kube, inf.Kemu, recorder, evacuation.Options{})
	if err != nil {
		return nil, err
	}
	return []controller.Runnable{vmic, vmc, nodec, migc, certc, evacc}, nil
}

// leaderElect runs run while this instance holds the Lease. The Lease is
// released only after run returned (the controllers stopped), so two leaders
// never work at once; losing it is an error (exit 1: the Pod restarts and
// competes again).
func leaderElect(ctx context.Context, o options, cfg *rest.Config, run func(context.Context) error) error {
	id := o.identity
	if id == "" {
		host, _ := os.Hostname()
		id = fmt.Sprintf("%s_%d", host, time.Now().UnixNano())
	}
	lock, err := resourcelock.NewFromKubeconfig(resourcelock.LeasesResourceLock, o.leaseNamespace, o.leaseName,
		resourcelock.ResourceLockConfig{Identity: id}, cfg, o.renewDeadline)
	if err != nil {
		return err
	}
	leading := make(chan context.Context, 1)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, Name: o.leaseName, ReleaseOnCancel: true,
		LeaseDuration: o.leaseDuration, RenewDeadline: o.renewDeadline, RetryPeriod: o.retryPeriod,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) { leading <- lctx },
			OnStoppedLeading: func() {},
			OnNewLeader: func(identity string) {
				if identity != id {
					klog.InfoS("Another instance leads", "leader", identity)
				}
			},
		},
	})
	if err != nil {
		return err
	}
	// The elector's context ends only after the controllers stopped.
	leCtx, leCancel := context.WithCancel(context.Background())
	defer leCancel()
	electorDone := make(chan struct{})
	go func() {
		defer close(electorDone)
		le.Run(leCtx)
	}()
	select {
	case <-ctx.Done():
		leCancel()
		<-electorDone
		return nil
	case <-electorDone:
		return errors.New("leader election ended")
	case lctx := <-leading:
		klog.InfoS("Leading: starting controllers", "identity", id)
		runCtx, cancel := context.WithCancel(lctx)
		stop := context.AfterFunc(ctx, cancel)
		err := run(runCtx)
		stop()
		cancel()
		lost := lctx.Err() != nil && ctx.Err() == nil
		leCancel()
		<-electorDone
		if err != nil {
			return err
		}
		if lost {
			return errors.New("lost the leader Lease")
		}
		return nil
	}
}

func startHTTP(addr string, ready *atomic.Bool) (*http.Server, string, error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics.Handler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		// Ready once this instance runs its controllers (it leads).
		if !ready.Load() {
			http.Error(w, "not leading", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "metrics server")
		}
	}()
	klog.InfoS("Serving /metrics, /healthz, /readyz", "addr", ln.Addr().String())
	return srv, ln.Addr().String(), nil
}
