// Package migration is the VirtualMachineInstanceMigration controller (the
// controller's side of docs/migration.md, "The handoff through the API"):
// it refuses a migration that cannot run, holds one over the limits in
// Pending, creates the target launcher Pod (the source's template, off the
// source node), writes the VMI's migrationState at Scheduled, follows the
// node agents' fields through PreparingTarget, TargetReady and Running, and
// hands the VMI over to the target (nodeName, launcherPod) at the end. A
// failure or a timeout deletes the target Pod; deleting the migration
// cancels it (finalizer Finalizer).
//
// Shape (sample-controller, as controller/vmi): event handlers enqueue
// migration keys; workers run the idempotent sync (sync.go).
package migration

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
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
	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/controller/template"
	"github.com/kemu-dev/kemu/kube/expectations"
	"github.com/kemu-dev/kemu/kube/status"
	"github.com/kemu-dev/kemu/kube/worker"
)

// QueueName names the controller's work queue (work-queue metrics label).
const QueueName = "migration"

// KeepFinished is how many finished migrations of a VMI are kept; older
// ones are deleted (KubeVirt keeps five too).
const KeepFinished = 5

// Config are New's inputs; the informers come from factories the caller
// starts after New (controller.Informers), the Pod informer with launcher
// Pods only.
type Config struct {
	KubeClient        kubernetes.Interface
	KemuClient        versioned.Interface
	MigrationInformer kemuinformers.VirtualMachineInstanceMigrationInformer
	VMIInformer       kemuinformers.VirtualMachineInstanceInformer
	PodInformer       coreinformers.PodInformer
	Template          *template.Service
	Recorder          record.EventRecorder
	// Limits, Timeouts and Policy: zero values are replaced by the
	// defaults (DefaultLimits, DefaultTimeouts); Policy is used as given.
	Limits   Limits
	Timeouts Timeouts
	Policy   Policy
	// AllowSameNode drops the target Pod's affinity against the source
	// node (tests on one node only).
	AllowSameNode bool
	// LimitRetry: how soon a migration held back by the limits is checked
	// again (besides every migration's end); 0 is 5 s.
	LimitRetry time.Duration
}

// Controller is the migration controller.
type Controller struct {
	cfg          Config
	migLister    kemulisters.VirtualMachineInstanceMigrationLister
	vmiLister    kemulisters.VirtualMachineInstanceLister
	podLister    corelisters.PodLister
	synced       []cache.InformerSynced
	queue        workqueue.TypedRateLimitingInterface[string]
	expectations *expectations.Expectations
	written      status.Writes
	// admit serializes the decision to create a target Pod (refusal,
	// limits, create), so two workers never both take the last slot;
	// inflight holds the migrations whose target Pod was created but whose
	// Scheduling phase (or Pod) the caches may not show yet.
	admit    sync.Mutex
	inflight map[types.UID]bool
	runOnce  sync.Once
}

// New builds the controller and registers its event handlers.
func New(cfg Config) (*Controller, error) {
	if cfg.KubeClient == nil || cfg.KemuClient == nil || cfg.MigrationInformer == nil || cfg.VMIInformer == nil ||
		cfg.PodInformer == nil || cfg.Template == nil || cfg.Recorder == nil {
		return nil, fmt.Errorf("migration controller: incomplete config")
	}
	if cfg.Limits == (Limits{}) {
		cfg.Limits = DefaultLimits()
	}
	if cfg.Limits.PerCluster < 1 || cfg.Limits.OutboundPerNode < 1 {
		return nil, fmt.Errorf("migration controller: limits must be at least 1: %+v", cfg.Limits)
	}
	if cfg.Timeouts == (Timeouts{}) {
		cfg.Timeouts = DefaultTimeouts()
	}
	if cfg.Timeouts.Unschedulable <= 0 || cfg.Timeouts.Pending <= 0 {
		return nil, fmt.Errorf("migration controller: timeouts must be positive: %+v", cfg.Timeouts)
	}
	if cfg.LimitRetry <= 0 {
		cfg.LimitRetry = 5 * time.Second
	}
	c := &Controller{
		cfg:       cfg,
		migLister: cfg.MigrationInformer.Lister(),
		vmiLister: cfg.VMIInformer.Lister(),
		podLister: cfg.PodInformer.Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: QueueName}),
		expectations: expectations.New(0, nil),
		inflight:     map[types.UID]bool{},
	}
	c.synced = []cache.InformerSynced{cfg.MigrationInformer.Informer().HasSynced,
		cfg.VMIInformer.Informer().HasSynced, cfg.PodInformer.Informer().HasSynced}
	if _, err := cfg.MigrationInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: c.updateMigration,
		DeleteFunc: c.deleteMigration,
	}); err != nil {
		return nil, err
	}
	if _, err := cfg.VMIInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueVMI,
		UpdateFunc: func(_, obj any) { c.enqueueVMI(obj) },
		DeleteFunc: c.enqueueVMI,
	}); err != nil {
		return nil, err
	}
	if _, err := cfg.PodInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.podEvent(obj, true) },
		UpdateFunc: func(_, obj any) { c.podEvent(obj, false) },
		DeleteFunc: func(obj any) { c.podEvent(obj, false) },
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// Run waits for the caches, runs workers until ctx ends, then drains.
func (c *Controller) Run(ctx context.Context, workers int) error {
	started := false
	c.runOnce.Do(func() { started = true })
	if !started {
		return fmt.Errorf("migration controller: Run called twice")
	}
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx).WithValues("controller", QueueName)
	logger.Info("Starting controller", "workers", workers)
	if !cache.WaitForNamedCacheSync(QueueName, ctx.Done(), c.synced...) {
		return fmt.Errorf("migration controller: caches did not sync")
	}
	worker.Run(ctx, c.queue, workers, QueueName, c.sync)
	logger.Info("Stopped controller")
	return nil
}

func (c *Controller) enqueue(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

// updateMigration: a migration that ends frees a slot, so every waiting
// one is looked at again.
func (c *Controller) updateMigration(oldObj, newObj any) {
	old, cur := oldObj.(*v1.VirtualMachineInstanceMigration), newObj.(*v1.VirtualMachineInstanceMigration)
	c.enqueue(cur)
	if !old.Status.Phase.IsFinal() && cur.Status.Phase.IsFinal() {
		c.enqueueWaiting()
	}
}

func (c *Controller) deleteMigration(obj any) {
	c.enqueue(obj)
	c.enqueueWaiting()
}

// enqueueWaiting queues every migration that waits for a slot.
func (c *Controller) enqueueWaiting() {
	all, err := c.migLister.List(everything)
	if err != nil {
		return
	}
	for _, m := range all {
		if m.Status.Phase == v1.MigrationPending {
			c.enqueue(m)
		}
	}
}

// enqueueVMI queues the migrations of a VMI.
func (c *Controller) enqueueVMI(obj any) {
	vmi, ok := obj.(*v1.VirtualMachineInstance)
	if !ok {
		tomb, ok := obj.(cache.DeletedFinalStateUnknown)
		if !ok {
			return
		}
		if vmi, ok = tomb.Obj.(*v1.VirtualMachineInstance); !ok {
			return
		}
	}
	c.enqueueMigrationsOf(vmi.Namespace, vmi.Name)
}

func (c *Controller) enqueueMigrationsOf(ns, vmiName string) {
	all, err := c.migLister.VirtualMachineInstanceMigrations(ns).List(everything)
	if err != nil {
		return
	}
	for _, m := range all {
		if m.Spec.VMIName == vmiName {
			c.enqueue(m)
		}
	}
}

// podEvent queues the migrations of the Pod's VMI; a target Pod's add
// event settles its migration's creation expectation, and a target Pod
// that changes or goes may free a slot.
func (c *Controller) podEvent(obj any, added bool) {
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
	vmiName, ok := ownerVMI(pod)
	if !ok {
		return
	}
	if uid := pod.Labels[launcherpod.MigrationUIDLabel]; uid != "" {
		if added {
			if m := c.migrationByUID(pod.Namespace, types.UID(uid)); m != nil {
				c.expectations.CreationObserved(m.Namespace + "/" + m.Name)
			}
		} else {
			c.enqueueWaiting()
		}
	}
	c.enqueueMigrationsOf(pod.Namespace, vmiName)
}

func (c *Controller) migrationByUID(ns string, uid types.UID) *v1.VirtualMachineInstanceMigration {
	all, err := c.migLister.VirtualMachineInstanceMigrations(ns).List(everything)
	if err != nil {
		return nil
	}
	for _, m := range all {
		if m.UID == uid {
			return m
		}
	}
	return nil
}
