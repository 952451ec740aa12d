// Package vm is kemu's VirtualMachine controller: it keeps a VM's
// VirtualMachineInstance running or stopped according to the VM's
// runStrategy (KubeVirt's semantics: Always, RerunOnFailure, Once, Manual,
// Halted), restarts failed starts with an exponential back-off
// (CrashLoopBackOff), and summarises the VMI in the VM's status
// (printableStatus, ready, created, conditions). See docs/vm.md.
//
// It is a sample-controller style controller: VM and VMI informers feed a
// rate-limited work queue of VM keys; each key is reconciled idempotently
// from the informer caches, with expectations so a stale cache never creates
// a second VMI or deletes a new one.
package vm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	kemuinformers "github.com/kemu-dev/kemu/api/client/informers/externalversions"
	listers "github.com/kemu-dev/kemu/api/client/listers/api/v1alpha1"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/kube/cdi"
	"github.com/kemu-dev/kemu/kube/expectations"
	"github.com/kemu-dev/kemu/kube/instancetypes"
	"github.com/kemu-dev/kemu/kube/worker"
)

// Defaults of Options.
const (
	DefaultStartBackoffBase   = 10 * time.Second
	DefaultStartBackoffMax    = 5 * time.Minute
	DefaultStartBackoffJitter = 0.5
	// ExpectationsTimeout is how long an unobserved create or delete blocks
	// further actions on a VM (as in Kubernetes' controllers).
	ExpectationsTimeout = expectations.DefaultTTL
)

// Options tune the controller. The zero value is the default.
type Options struct {
	// StartBackoffBase is the wait before restarting a VM whose VMI failed
	// to start once; it doubles with every further consecutive failure up to
	// StartBackoffMax. Defaults DefaultStartBackoffBase, DefaultStartBackoffMax.
	StartBackoffBase time.Duration
	StartBackoffMax  time.Duration
	// StartBackoffJitter adds up to this fraction of the wait at random, so
	// many failing VMs do not retry in step. 0 means
	// DefaultStartBackoffJitter, negative none.
	StartBackoffJitter float64
	// Now is the clock (default time.Now).
	Now func() time.Time
	// DataVolumes follows CDI's DataVolumes (the caller runs it); nil: CDI
	// is never looked for, as if not installed, and a VM with
	// dataVolumeTemplates fails.
	DataVolumes *cdi.Watcher
}

func (o *Options) defaults() {
	if o.StartBackoffBase <= 0 {
		o.StartBackoffBase = DefaultStartBackoffBase
	}
	if o.StartBackoffMax <= 0 {
		o.StartBackoffMax = DefaultStartBackoffMax
	}
	if o.StartBackoffMax < o.StartBackoffBase {
		o.StartBackoffMax = o.StartBackoffBase
	}
	if o.StartBackoffJitter == 0 {
		o.StartBackoffJitter = DefaultStartBackoffJitter
	}
	if o.StartBackoffJitter < 0 {
		o.StartBackoffJitter = 0
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Controller reconciles VirtualMachines.
type Controller struct {
	kube     kubernetes.Interface
	kemu     versioned.Interface
	recorder record.EventRecorder
	opts     Options

	vmLister  listers.VirtualMachineLister
	vmiLister listers.VirtualMachineInstanceLister
	lookup    *instancetypes.Lookup
	synced    []cache.InformerSynced
	factories []interface{ Start(<-chan struct{}) }

	queue        workqueue.TypedRateLimitingInterface[string]
	expectations *expectations.Expectations
	backoff      backoff

	runOnce sync.Once
}

// New builds a VM controller on the given informer factories; Run starts
// them (starting a factory twice is harmless). The recorder's scheme must
// know kemu.dev/v1alpha1 (v1alpha1.AddToScheme), as events are about VMs.
func New(kube kubernetes.Interface, kemu versioned.Interface, kubeInformers kubeinformers.SharedInformerFactory,
	kemuInformers kemuinformers.SharedInformerFactory, recorder record.EventRecorder, opts Options) (*Controller, error) {
	if kube == nil || kemu == nil || kubeInformers == nil || kemuInformers == nil || recorder == nil {
		return nil, errors.New("vm controller: clients, informer factories and recorder are required")
	}
	opts.defaults()
	vms := kemuInformers.Kemu().V1alpha1().VirtualMachines()
	vmis := kemuInformers.Kemu().V1alpha1().VirtualMachineInstances()
	its := kemuInformers.Instancetype().V1beta1()
	lookup := &instancetypes.Lookup{Kube: kube, Kemu: kemu,
		Instancetypes:        its.VirtualMachineInstancetypes().Lister(),
		ClusterInstancetypes: its.VirtualMachineClusterInstancetypes().Lister(),
		Preferences:          its.VirtualMachinePreferences().Lister(),
		ClusterPreferences:   its.VirtualMachineClusterPreferences().Lister(),
		Revisions:            kubeInformers.Apps().V1().ControllerRevisions().Lister(),
		Claims:               kubeInformers.Core().V1().PersistentVolumeClaims().Lister(),
	}
	c := &Controller{
		kube:      kube,
		kemu:      kemu,
		recorder:  recorder,
		opts:      opts,
		vmLister:  vms.Lister(),
		vmiLister: vmis.Lister(),
		lookup:    lookup,
		synced: []cache.InformerSynced{vms.Informer().HasSynced, vmis.Informer().HasSynced,
			its.VirtualMachineInstancetypes().Informer().HasSynced, its.VirtualMachineClusterInstancetypes().Informer().HasSynced,
			its.VirtualMachinePreferences().Informer().HasSynced, its.VirtualMachineClusterPreferences().Informer().HasSynced,
			kubeInformers.Apps().V1().ControllerRevisions().Informer().HasSynced,
			kubeInformers.Core().V1().PersistentVolumeClaims().Informer().HasSynced},
		factories: []interface{ Start(<-chan struct{}) }{kubeInformers, kemuInformers},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "kemu-vm"}),
		expectations: expectations.New(ExpectationsTimeout, opts.Now),
		backoff: backoff{base: opts.StartBackoffBase, max: opts.StartBackoffMax,
			jitter: opts.StartBackoffJitter},
	}
	if _, err := vms.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, cur any) { c.enqueue(cur) },
		DeleteFunc: c.vmDeleted,
	}); err != nil {
		return nil, fmt.Errorf("vm controller: %w", err)
	}
	if _, err := vmis.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.vmiAdded,
		UpdateFunc: c.vmiUpdated,
		DeleteFunc: c.vmiDeleted,
	}); err != nil {
		return nil, fmt.Errorf("vm controller: %w", err)
	}
	if opts.DataVolumes != nil {
		opts.DataVolumes.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    c.dataVolumeEvent,
			UpdateFunc: func(_, cur any) { c.dataVolumeEvent(cur) },
			DeleteFunc: c.dataVolumeEvent,
		})
		opts.DataVolumes.OnChange(c.enqueueWithTemplates)
	}
	return c, nil
}

// Run starts the informers, waits for their caches and runs workers until
// ctx ends. It returns an error only when the caches cannot sync.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	if workers < 1 {
		workers = 1
	}
	c.runOnce.Do(func() {
		for _, f := range c.factories {
			f.Start(ctx.Done())
		}
	})
	klog.InfoS("Starting VM controller", "workers", workers)
	if !cache.WaitForNamedCacheSync("kemu-vm", ctx.Done(), c.synced...) {
		return errors.New("vm controller: informer caches did not sync")
	}
	worker.Run(ctx, c.queue, workers, "vm", func(ctx context.Context, key string) (time.Duration, error) {
		return 0, c.sync(ctx, key)
	})
	klog.InfoS("Stopped VM controller")
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

func (c *Controller) vmDeleted(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.expectations.Delete(key)
	c.queue.Add(key)
}

// controlledByVM says whether the VMI's controller is a VirtualMachine.
func controlledByVM(vmi *v1.VirtualMachineInstance) bool {
	ref := metav1.GetControllerOf(vmi)
	return ref != nil && ref.Kind == "VirtualMachine" && ref.APIVersion == v1.APIVersion
}

// A VMI's VM has the VMI's namespace and name, so the VMI's key is the VM's.

func (c *Controller) vmiAdded(obj any) {
	vmi := obj.(*v1.VirtualMachineInstance)
	key, err := cache.MetaNamespaceKeyFunc(vmi)
	if err != nil {
		return
	}
	if vmi.DeletionTimestamp != nil {
		c.vmiDeleted(vmi)
		return
	}
	if controlledByVM(vmi) {
		c.expectations.CreationObserved(key)
	}
	c.queue.Add(key)
}

func (c *Controller) vmiUpdated(old, cur any) {
	oldVMI, curVMI := old.(*v1.VirtualMachineInstance), cur.(*v1.VirtualMachineInstance)
	if curVMI.ResourceVersion == oldVMI.ResourceVersion {
		return
	}
	if curVMI.DeletionTimestamp != nil {
		// A VMI marked for deletion counts as deleted: the VM may act on
		// (but never re-create over) it at once.
		c.vmiDeleted(curVMI)
		return
	}
	c.enqueue(curVMI)
}

func (c *Controller) vmiDeleted(obj any) {
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
	key, err := cache.MetaNamespaceKeyFunc(vmi)
	if err != nil {
		return
	}
	c.expectations.DeletionObserved(key, vmi.UID)
	c.queue.Add(key)
}
