// Package evacuation is kemu's answer to node maintenance, as KubeVirt's
// disruption-budget and evacuation controllers: a VMI whose
// evictionStrategy keeps it alive through a drain (LiveMigrate,
// LiveMigrateIfPossible when it can migrate, External) gets a
// PodDisruptionBudget over its launcher Pods, so `kubectl drain` cannot
// evict them; when its node is cordoned the VMI is marked
// (status.evacuationNodeName) and, unless External, a
// VirtualMachineInstanceMigration moves it away — the migration
// controller's limits pace them. Once the launcher Pod left the node the
// drain completes by itself. See docs/migration.md.
package evacuation

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	kemuinformers "github.com/kemu-dev/kemu/api/client/informers/externalversions"
	listers "github.com/kemu-dev/kemu/api/client/listers/api/v1alpha1"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/kube/expectations"
	"github.com/kemu-dev/kemu/kube/worker"
)

// Expectation keys of a VMI's key.
func budgetKey(vmi string) string    { return "pdb/" + vmi }
func migrationKey(vmi string) string { return "vmim/" + vmi }

// Defaults of Options.
const (
	// DefaultRetryAfterFailure is how long after a failed evacuation
	// migration the next one is created.
	DefaultRetryAfterFailure = time.Minute
)

// Options tune the controller. The zero value is the default.
type Options struct {
	RetryAfterFailure time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

func (o *Options) defaults() {
	if o.RetryAfterFailure <= 0 {
		o.RetryAfterFailure = DefaultRetryAfterFailure
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// vmiNodeIndex indexes VMIs by status.nodeName.
const vmiNodeIndex = "kemu.dev/evacuation-node"

// Controller keeps disruption budgets and evacuates cordoned nodes.
type Controller struct {
	kube     kubernetes.Interface
	kemu     versioned.Interface
	recorder record.EventRecorder
	opts     Options

	vmiLister  listers.VirtualMachineInstanceLister
	vmiIndexer cache.Indexer
	vmimLister listers.VirtualMachineInstanceMigrationLister
	nodeLister corelisters.NodeLister
	pdbLister  policylisters.PodDisruptionBudgetLister
	synced     []cache.InformerSynced
	factories  []interface{ Start(<-chan struct{}) }
	queue      workqueue.TypedRateLimitingInterface[string]
	runOnce    sync.Once
	// expect holds the budgets ("pdb/<vmi key>") and migrations
	// ("vmim/<vmi key>") created but not yet in the caches: a sync
	// between a create and its informer event creates nothing twice.
	expect *expectations.Expectations
}

// New builds the controller on the given informer factories (call it
// before they start: it adds an index to the VMI informer). The recorder's
// scheme must know kemu.dev/v1alpha1.
func New(kube kubernetes.Interface, kemu versioned.Interface, kubeInformers kubeinformers.SharedInformerFactory,
	kemuInformers kemuinformers.SharedInformerFactory, recorder record.EventRecorder, opts Options) (*Controller, error) {
	if kube == nil || kemu == nil || kubeInformers == nil || kemuInformers == nil || recorder == nil {
		return nil, errors.New("evacuation controller: clients, informer factories and recorder are required")
	}
	opts.defaults()
	vmis := kemuInformers.Kemu().V1alpha1().VirtualMachineInstances()
	vmims := kemuInformers.Kemu().V1alpha1().VirtualMachineInstanceMigrations()
	nodes := kubeInformers.Core().V1().Nodes()
	pdbs := kubeInformers.Policy().V1().PodDisruptionBudgets()
	if err := vmis.Informer().AddIndexers(cache.Indexers{vmiNodeIndex: func(obj any) ([]string, error) {
		if vmi, ok := obj.(*v1.VirtualMachineInstance); ok && vmi.Status.NodeName != "" {
			return []string{vmi.Status.NodeName}, nil
		}
		return nil, nil
	}}); err != nil {
		return nil, fmt.Errorf("evacuation controller: VMI index: %w", err)
	}
	c := &Controller{
		kube: kube, kemu: kemu, recorder: recorder, opts: opts,
		vmiLister: vmis.Lister(), vmiIndexer: vmis.Informer().GetIndexer(),
		vmimLister: vmims.Lister(), nodeLister: nodes.Lister(), pdbLister: pdbs.Lister(),
		synced: []cache.InformerSynced{vmis.Informer().HasSynced, vmims.Informer().HasSynced,
			nodes.Informer().HasSynced, pdbs.Informer().HasSynced},
		factories: []interface{ Start(<-chan struct{}) }{kubeInformers, kemuInformers},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "kemu-evacuation"}),
		expect: expectations.New(0, opts.Now),
	}
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	if _, err := vmis.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, cur any) { enqueue(cur) }, DeleteFunc: enqueue,
	}); err != nil {
		return nil, fmt.Errorf("evacuation controller: %w", err)
	}
	// A migration's phase changes the budget (two Pods while it runs) and
	// whether another one is needed.
	enqueueVMIM := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if m, ok := obj.(*v1.VirtualMachineInstanceMigration); ok {
			c.queue.Add(m.Namespace + "/" + m.Spec.VMIName)
		}
	}
	if _, err := vmims.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if m, ok := obj.(*v1.VirtualMachineInstanceMigration); ok && m.Labels[EvacuationLabel] != "" {
				c.expect.CreationObserved(migrationKey(m.Namespace + "/" + m.Spec.VMIName))
			}
			enqueueVMIM(obj)
		},
		UpdateFunc: func(_, cur any) { enqueueVMIM(cur) }, DeleteFunc: enqueueVMIM,
	}); err != nil {
		return nil, fmt.Errorf("evacuation controller: %w", err)
	}
	// A node cordoned or uncordoned: each of its VMIs.
	enqueueNode := func(old, cur any) {
		n, ok := cur.(interface{ GetName() string })
		if !ok {
			return
		}
		objs, _ := c.vmiIndexer.ByIndex(vmiNodeIndex, n.GetName())
		for _, o := range objs {
			enqueue(o)
		}
	}
	if _, err := nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(cur any) { enqueueNode(nil, cur) }, UpdateFunc: enqueueNode,
	}); err != nil {
		return nil, fmt.Errorf("evacuation controller: %w", err)
	}
	// A budget changed or deleted by someone else is put back.
	enqueuePDB := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if p, ok := obj.(*policyv1.PodDisruptionBudget); ok && p.Labels[BudgetForLabel] != "" {
			if ref := metav1.GetControllerOf(p); ref != nil && ref.Kind == "VirtualMachineInstance" {
				c.queue.Add(p.Namespace + "/" + ref.Name)
			}
		}
	}
	if _, err := pdbs.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if p, ok := obj.(*policyv1.PodDisruptionBudget); ok && p.Labels[BudgetForLabel] != "" {
				if ref := metav1.GetControllerOf(p); ref != nil && ref.Kind == "VirtualMachineInstance" {
					c.expect.CreationObserved(budgetKey(p.Namespace + "/" + ref.Name))
				}
			}
			enqueuePDB(obj)
		},
		UpdateFunc: func(_, cur any) { enqueuePDB(cur) }, DeleteFunc: enqueuePDB,
	}); err != nil {
		return nil, fmt.Errorf("evacuation controller: %w", err)
	}
	return c, nil
}

// Run starts the informers, waits for their caches and runs workers until
// ctx ends.
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
	klog.InfoS("Starting evacuation controller", "workers", workers)
	if !cache.WaitForNamedCacheSync("kemu-evacuation", ctx.Done(), c.synced...) {
		return errors.New("evacuation controller: informer caches did not sync")
	}
	worker.Run(ctx, c.queue, workers, "evacuation", c.sync)
	klog.InfoS("Stopped evacuation controller")
	return nil
}
