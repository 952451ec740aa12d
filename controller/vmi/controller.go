// Package vmi is the VirtualMachineInstance controller: it validates new
// VMIs, creates their launcher Pods (rendered by controller/template), moves
// them through Pending → Scheduling → Scheduled and hands them to the node
// agent; it fails a VMI whose Pod fails or vanishes, mirrors Pod scheduling
// and image problems into VMI conditions, and deletes the Pod when the VMI is
// deleted (a finalizer keeps the VMI until its Pod is gone).
//
// Shape (sample-controller): informer event handlers only enqueue
// namespace/name keys; workers take keys from a rate-limited queue and run
// the idempotent sync (sync.go), which reads the caches, makes at most one
// change of each kind and writes status through the status subresource.
package vmi

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	kemuinformers "github.com/kemu-dev/kemu/api/client/informers/externalversions/api/v1alpha1"
	kemulisters "github.com/kemu-dev/kemu/api/client/listers/api/v1alpha1"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/controller/metrics"
	"github.com/kemu-dev/kemu/controller/template"
	"github.com/kemu-dev/kemu/kube/cdi"
	"github.com/kemu-dev/kemu/kube/expectations"
	"github.com/kemu-dev/kemu/kube/status"
	"github.com/kemu-dev/kemu/kube/worker"
)

// QueueName names the controller's work queue (work-queue metrics label).
const QueueName = "vmi"

// KVMPolicy decides whether launcher Pods request devices.kemu.dev/kvm.
type KVMPolicy string

// KVM policies.
const (
	// KVMAuto: a VMI selecting kemu.dev/kvm gets what it selects; otherwise
	// KVM when a schedulable node matching the VMI's nodeSelector has
	// kemu.dev/kvm=true, else TCG.
	KVMAuto KVMPolicy = "auto"
	// KVMAlways: every Pod requests KVM (KubeVirt without emulation).
	KVMAlways KVMPolicy = "always"
	// KVMNever: every VM runs under TCG (KubeVirt's useEmulation).
	KVMNever KVMPolicy = "never"
)

// Config are New's inputs. The informers must come from factories the
// caller starts after New (controller.Informers); the Pod informer should
// hold only launcher Pods.
type Config struct {
	KubeClient   kubernetes.Interface
	KemuClient   versioned.Interface
	VMIInformer  kemuinformers.VirtualMachineInstanceInformer
	PodInformer  coreinformers.PodInformer
	NodeInformer coreinformers.NodeInformer
	PVCInformer  coreinformers.PersistentVolumeClaimInformer
	Template     *template.Service
	Recorder     record.EventRecorder
	// DataVolumes follows CDI's DataVolumes (the caller runs it); nil: CDI
	// is never looked for, as if not installed.
	DataVolumes *cdi.Watcher
	// KVM is the KVM policy; "" is KVMAuto.
	KVM KVMPolicy
	// ExpectationsTTL bounds how long an unobserved Pod creation blocks its
	// VMI (expectations.DefaultTTL when 0).
	ExpectationsTTL time.Duration
	// BackendStorage configures the claims of persistent TPMs
	// (backendstorage.go).
	BackendStorage BackendStorage
}

// Controller is the VMI controller.
type Controller struct {
	cfg          Config
	vmiLister    kemulisters.VirtualMachineInstanceLister
	podLister    corelisters.PodLister
	nodeLister   corelisters.NodeLister
	pvcLister    corelisters.PersistentVolumeClaimLister
	synced       []cache.InformerSynced
	queue        workqueue.TypedRateLimitingInterface[string]
	expectations *expectations.Expectations
	// written: while the cache still shows the VMI our last write replaced,
	// it is known stale (our own write not seen yet) and not synced.
	written status.Writes
	// ended: why deleted launcher Pods ended, for a sync that finds them gone.
	ended   podEnds
	runOnce sync.Once
}

// New builds the controller and registers its event handlers.
func New(cfg Config) (*Controller, error) {
	if cfg.KubeClient == nil || cfg.KemuClient == nil || cfg.VMIInformer == nil || cfg.PodInformer == nil ||
		cfg.NodeInformer == nil || cfg.PVCInformer == nil || cfg.Template == nil || cfg.Recorder == nil {
		return nil, fmt.Errorf("vmi controller: incomplete config")
	}
	switch cfg.KVM {
	case "":
		cfg.KVM = KVMAuto
	case KVMAuto, KVMAlways, KVMNever:
	default:
		return nil, fmt.Errorf("vmi controller: unknown KVM policy %q", cfg.KVM)
	}
	metrics.Register()
	c := &Controller{
		cfg:        cfg,
		vmiLister:  cfg.VMIInformer.Lister(),
		podLister:  cfg.PodInformer.Lister(),
		nodeLister: cfg.NodeInformer.Lister(),
		pvcLister:  cfg.PVCInformer.Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: QueueName}),
		expectations: expectations.New(cfg.ExpectationsTTL, nil),
	}
	c.synced = []cache.InformerSynced{cfg.VMIInformer.Informer().HasSynced, cfg.PodInformer.Informer().HasSynced,
		cfg.NodeInformer.Informer().HasSynced, cfg.PVCInformer.Informer().HasSynced}

	if _, err := cfg.VMIInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: c.updateVMI,
		DeleteFunc: c.deleteVMI,
	}); err != nil {
		return nil, err
	}
	if _, err := cfg.PodInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.addPod,
		UpdateFunc: func(_, obj any) { c.enqueuePodOwner(obj) },
		DeleteFunc: c.deletePod,
	}); err != nil {
		return nil, err
	}
	// A pending VMI waits for its claims and DataVolumes: their events
	// requeue it. Nodes are only read while rendering.
	claimEvents := cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueClaimUsers,
		UpdateFunc: func(_, obj any) { c.enqueueClaimUsers(obj) },
		DeleteFunc: c.enqueueClaimUsers,
	}
	if _, err := cfg.PVCInformer.Informer().AddEventHandler(claimEvents); err != nil {
		return nil, err
	}
	if cfg.DataVolumes != nil {
		cfg.DataVolumes.AddEventHandler(claimEvents)
		cfg.DataVolumes.OnChange(c.enqueuePending)
	}
	return c, nil
}

// Run waits for the caches, runs workers until ctx ends, then drains.
func (c *Controller) Run(ctx context.Context, workers int) error {
	started := false
	c.runOnce.Do(func() { started = true })
	if !started {
		return fmt.Errorf("vmi controller: Run called twice")
	}
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx).WithValues("controller", "vmi")
	logger.Info("Starting controller", "workers", workers)
	if !cache.WaitForNamedCacheSync("vmi", ctx.Done(), c.synced...) {
		return fmt.Errorf("vmi controller: caches did not sync")
	}
	worker.Run(ctx, c.queue, workers, "vmi", func(ctx context.Context, key string) (time.Duration, error) {
		res, err := c.sync(ctx, key)
		return res.requeueAfter, err
	})
	logger.Info("Stopped controller")
	return nil
}

func (c *Controller) enqueue(obj any) {
	key, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

func (c *Controller) updateVMI(oldObj, newObj any) {
	old, cur := oldObj.(*v1.VirtualMachineInstance), newObj.(*v1.VirtualMachineInstance)
	// Every phase entered, also those the node agent sets (KubeVirt's
	// measure), from the transition timestamps written since the last
	// event: a write that passes through Pending to Scheduling counts both.
	if n := len(old.Status.PhaseTransitionTimestamps); len(cur.Status.PhaseTransitionTimestamps) > n {
		for _, t := range cur.Status.PhaseTransitionTimestamps[n:] {
			metrics.PhaseTransitionFromCreation.WithLabelValues(string(t.Phase)).
				Observe(t.PhaseTransitionTimestamp.Sub(cur.CreationTimestamp.Time).Seconds())
		}
	}
	c.enqueue(newObj)
}

func (c *Controller) deleteVMI(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

// podOwnerKey returns the key of the VMI controlling pod, if any.
func podOwnerKey(pod *corev1.Pod) (string, bool) {
	for _, ref := range pod.OwnerReferences {
		if ref.Controller != nil && *ref.Controller && ref.Kind == "VirtualMachineInstance" &&
			ref.APIVersion == v1.SchemeGroupVersion.String() {
			return pod.Namespace + "/" + ref.Name, true
		}
	}
	return "", false
}

func (c *Controller) addPod(obj any) {
	pod := obj.(*corev1.Pod)
	if key, ok := podOwnerKey(pod); ok {
		if !isMigrationTarget(pod) { // issue 17: the migration controller creates those
			c.expectations.CreationObserved(key)
		}
		c.queue.Add(key)
	}
}

func (c *Controller) enqueuePodOwner(obj any) {
	if key, ok := podOwnerKey(obj.(*corev1.Pod)); ok {
		c.queue.Add(key)
	}
}

func (c *Controller) deletePod(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		tomb, ok := obj.(cache.DeletedFinalStateUnknown)
		if !ok {
			return
		}
		if pod, ok = tomb.Obj.(*corev1.Pod); !ok {
			return
		}
	}
	if key, ok := podOwnerKey(pod); ok {
		c.ended.record(pod, time.Now())
		c.expectations.DeletionObserved(key, pod.UID)
		c.queue.Add(key)
	}
}
