// Package vmi is the node agent's VMI controller (KubeVirt's virt-handler
// VM controller): it reconciles the VirtualMachineInstances whose
// status.nodeName is this node with their launchers.
//
// It keeps one entry per launcher Pod on this node (launchers.go), keyed by
// the Pod's UID, with the VMI it belongs to and its role: a VMI may have
// more than one launcher Pod here, and exactly one of them, the source
// (status.launcherPod, else the newest), is the one whose domain is the
// VMI's status and that gets commands. For each launcher Pod of a VMI it
// finds the Pod's sockets emptyDir on the host
// (<kubelet-root>/pods/<pod uid>/volumes/kubernetes.io~empty-dir/sockets),
// waits for launcher.sock (the launcher's readiness signal), connects — only
// to the right launcher: no symlink on the way, a socket, a process in the
// Pod's cgroup, the VMI's UID in Info; anything else is refused with the
// LauncherUnverified condition and a Warning event, and nothing is sent to
// it (launcherclient) — follows WatchDomain (resuming from the last seq
// after a broken stream) and, for the source, calls Sync with the VMI (again
// whenever metadata.generation changes; on a running launcher Sync is a
// no-op) and writes the domain's state into the VMI's status (ApplyStatus).
// It turns the kemu.dev/paused and kemu.dev/soft-reboot
// annotations into Pause/Unpause and a soft reboot, and a deleted VMI (or a
// terminating launcher Pod) into Shutdown with the VMI's grace period, then
// Kill. A launcher that vanishes without a final state fails the VMI
// (reason LauncherGone).
//
// Shape (sample-controller): informer handlers only enqueue the VMI's
// namespace/name key (a launcher Pod's event its VMI's); workers run the
// idempotent sync of the VMI and its launchers: per-launcher work
// (connection, watch, verification, cleanup once its Pod is gone) on each
// entry, VMI-level work (status, annotations) with the source. Slow RPCs
// (Sync, Shutdown) and the domain watch run in per-launcher goroutines that
// enqueue the VMI's key when they learn something. Status is written through the status subresource only
// when it changed, re-read and recomputed on a conflict.
package vmi

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	kemuinformers "github.com/kemu-dev/kemu/api/client/informers/externalversions"
	kemulisters "github.com/kemu-dev/kemu/api/client/listers/api/v1alpha1"
	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/kube/status"
	"github.com/kemu-dev/kemu/kube/worker"
	"github.com/kemu-dev/kemu/nodeagent/hostdisk"
)

// Defaults.
const (
	// DefaultSocketPoll is how often a VMI waiting for its launcher's socket
	// is looked at again.
	DefaultSocketPoll = time.Second
	// DefaultGuestInfoInterval is how often the guest agent is asked for
	// OS info and interfaces while it is connected.
	DefaultGuestInfoInterval = time.Minute
	// DefaultAgentProbeInterval is how often the guest agent is pinged
	// while it is not connected and the guest runs.
	DefaultAgentProbeInterval = 5 * time.Second
	agentProbeTimeout         = 3 * time.Second
	rpcTimeout                = 10 * time.Second
	syncTimeout               = 6 * time.Minute
)

// Config are New's inputs.
type Config struct {
	KubeClient kubernetes.Interface
	KemuClient versioned.Interface
	// NodeName is this node: the VMIs with this status.nodeName are
	// reconciled.
	NodeName string
	// KubeletRoot is the kubelet's --root-dir (launcher sockets live under
	// its pods/ folder).
	KubeletRoot string
	// Resync is the informers' resync period (0 = none).
	Resync time.Duration
	// Recorder records the VMIs' events (a refused launcher). Required.
	Recorder record.EventRecorder
	// SocketPoll, GuestInfoInterval and AgentProbeInterval: see the
	// defaults.
	SocketPoll         time.Duration
	GuestInfoInterval  time.Duration
	AgentProbeInterval time.Duration
	// HostDiskDirs are the node directories hostDisks may live under
	// (kemu-config hostDiskDirs); a VMI's hostDisks are checked on the host
	// before its launcher may start QEMU (nodeagent/hostdisk).
	HostDiskDirs []string
	// HostRoot is the host's / as this process sees it (default "/").
	HostRoot string
	// Migrations is this node's migration proxy; nil: the node agent
	// takes no part in migrations (their roles' launchers are followed
	// but sent nothing of a migration).
	Migrations Migrations
	// MigrationAddress and MigrationPort are where this node's proxy is
	// reached (the target role writes them into migrationState).
	MigrationAddress string
	MigrationPort    int32
	// LauncherSocketsDir is the launcher's sockets directory as the
	// launcher sees it (default launcherpod.SocketsDir): the source's
	// Migrate names its proxy sockets there.
	LauncherSocketsDir string
}

// Controller is the node agent's VMI controller.
type Controller struct {
	cfg   Config
	queue workqueue.TypedRateLimitingInterface[string]

	vmiLister kemulisters.VirtualMachineInstanceLister
	podLister corelisters.PodLister

	mu sync.Mutex
	// launchers holds one entry per launcher Pod on this node, keyed by the
	// Pod's UID (launchers.go).
	launchers map[types.UID]*launcherState
	runCtx    context.Context

	// written: a cache still showing the VMI our last status write
	// replaced is stale.
	written status.Writes

	// pvcs caches the access modes of each VMI's PVCs (LiveMigratable),
	// by VMI key (guarded by mu).
	pvcs map[string]pvcCache

	// sockets wakes a VMI when its launcher's socket appears (nil: the
	// node agent polls; set by Run).
	sockets *socketWatch
}

// New checks the configuration; Run starts the informers and workers.
func New(cfg Config) (*Controller, error) {
	var errs []error
	if cfg.KubeClient == nil || cfg.KemuClient == nil {
		errs = append(errs, errors.New("vmi: Kubernetes and kemu clients are required"))
	}
	if cfg.NodeName == "" {
		errs = append(errs, errors.New("vmi: NodeName is required"))
	}
	if cfg.KubeletRoot == "" {
		errs = append(errs, errors.New("vmi: KubeletRoot is required"))
	}
	if cfg.Recorder == nil {
		errs = append(errs, errors.New("vmi: Recorder is required"))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if cfg.SocketPoll <= 0 {
		cfg.SocketPoll = DefaultSocketPoll
	}
	if cfg.GuestInfoInterval <= 0 {
		cfg.GuestInfoInterval = DefaultGuestInfoInterval
	}
	if cfg.AgentProbeInterval <= 0 {
		cfg.AgentProbeInterval = DefaultAgentProbeInterval
	}
	if cfg.HostRoot == "" {
		cfg.HostRoot = hostdisk.DefaultHostRoot
	}
	if cfg.LauncherSocketsDir == "" {
		cfg.LauncherSocketsDir = launcherpod.SocketsDir
	}
	if cfg.Migrations != nil && (cfg.MigrationAddress == "" || cfg.MigrationPort <= 0) {
		return nil, errors.New("vmi: Migrations needs MigrationAddress and MigrationPort")
	}
	return &Controller{
		cfg: cfg,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodeagent-vmi"}),
		launchers: map[types.UID]*launcherState{},
		pvcs:      map[string]pvcCache{},
	}, nil
}

// Run watches this node's VMIs and launcher Pods and reconciles them with
// workers until ctx ends; it then closes every launcher connection (the
// VMs keep running) and returns nil. It returns an error if the caches
// cannot sync.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx).WithValues("node", c.cfg.NodeName)
	ctx = klog.NewContext(ctx, logger)
	c.mu.Lock()
	c.runCtx = ctx
	c.mu.Unlock()

	// Every VMI is watched and filtered here: besides those whose
	// status.nodeName is this node, a node agent needs the VMIs migrating to
	// and from it (migrationState.targetNode, sourceNode), which no single
	// field selector names.
	if err := c.waitForCRD(ctx); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return nil // stopped while waiting for the CRD
	}
	kemuFactory := kemuinformers.NewSharedInformerFactory(c.cfg.KemuClient, c.cfg.Resync)
	podFactory := informers.NewSharedInformerFactoryWithOptions(c.cfg.KubeClient, c.cfg.Resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = launcherpod.AppLabel + "=" + launcherpod.AppLauncher
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", c.cfg.NodeName).String()
		}))
	vmiInf := kemuFactory.Kemu().V1alpha1().VirtualMachineInstances()
	podInf := podFactory.Core().V1().Pods()
	c.vmiLister, c.podLister = vmiInf.Lister(), podInf.Lister()
	if _, err := vmiInf.Informer().AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: func(obj any) bool {
			vmi, ok := obj.(*v1.VirtualMachineInstance)
			return ok && c.concerns(vmi)
		},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    c.enqueueVMI,
			UpdateFunc: func(_, obj any) { c.enqueueVMI(obj) },
			DeleteFunc: c.enqueueVMI,
		},
	}); err != nil {
		return err
	}
	if _, err := podInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueuePod,
		UpdateFunc: func(_, obj any) { c.enqueuePod(obj) },
		DeleteFunc: c.enqueuePod,
	}); err != nil {
		return err
	}
	kemuFactory.Start(ctx.Done())
	podFactory.Start(ctx.Done())
	defer kemuFactory.Shutdown()
	defer podFactory.Shutdown()
	if !cache.WaitForNamedCacheSync("nodeagent-vmi", ctx.Done(), vmiInf.Informer().HasSynced, podInf.Informer().HasSynced) {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("vmi: caches did not sync")
	}
	if sw, err := newSocketWatch(func(key string) { c.queue.Add(key) }); err != nil {
		logger.Error(err, "Launcher sockets are polled, not watched", "every", c.cfg.SocketPoll)
	} else {
		c.sockets = sw
		go sw.Run()
		defer sw.Close()
	}
	logger.Info("Node agent VMI controller started", "workers", workers, "kubeletRoot", c.cfg.KubeletRoot)
	worker.Run(ctx, c.queue, workers, "nodeagent-vmi", func(ctx context.Context, key string) (time.Duration, error) {
		after, err := c.sync(ctx, key)
		reconciles.WithLabelValues(map[bool]string{true: "error", false: "success"}[err != nil]).Inc()
		return after, err
	})
	c.closeAll()
	logger.Info("Node agent VMI controller stopped")
	return nil
}

// waitForCRD waits until VMIs can be listed (the kemu.dev CRD exists).
func (c *Controller) waitForCRD(ctx context.Context) error {
	err := wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := c.cfg.KemuClient.KemuV1alpha1().VirtualMachineInstances("").List(ctx, metav1.ListOptions{Limit: 1})
		if err == nil {
			return true, nil
		}
		klog.FromContext(ctx).Error(err, "Listing VMIs (is the kemu.dev CRD installed?); retrying")
		return false, nil
	})
	if err != nil && ctx.Err() != nil {
		return nil
	}
	return err
}

// concerns says whether a VMI is this node's: its status.nodeName, or a
// migration's target or source node.
func (c *Controller) concerns(vmi *v1.VirtualMachineInstance) bool {
	if vmi.Status.NodeName == c.cfg.NodeName {
		return true
	}
	ms := vmi.Status.MigrationState
	return ms != nil && ms.MigrationUID != "" && (ms.TargetNode == c.cfg.NodeName || ms.SourceNode == c.cfg.NodeName)
}

func (c *Controller) enqueueVMI(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

func (c *Controller) enqueuePod(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	// The VMI's name comes from the Pod's controller reference: the
	// vmi-name label is cut and hashed for a name that is no label value
	// (launcherpod.VMINameLabelValue).
	if ref := metav1.GetControllerOf(pod); ref != nil && ref.Kind == "VirtualMachineInstance" && ref.APIVersion == v1.SchemeGroupVersion.String() {
		c.queue.Add(pod.Namespace + "/" + ref.Name)
		return
	}
	if name := pod.Labels[launcherpod.VMINameLabel]; name != "" {
		c.queue.Add(pod.Namespace + "/" + name)
	}
}
