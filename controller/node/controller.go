// Package node is kemu's node controller: it watches the heartbeat the
// node agent writes on its Node (annotation kemu.dev/heartbeat) and, when a
// heartbeat is older than a threshold, labels the node
// kemu.dev/schedulable=false and fails the node's VMIs whose launcher Pods
// are gone (phase Failed, reason NodeUnresponsive), so their VMs can start
// them elsewhere. Nodes without the annotation are not kemu nodes and are
// left alone. See docs/vm.md.
package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	kemuinformers "github.com/kemu-dev/kemu/api/client/informers/externalversions"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"

	"github.com/kemu-dev/kemu/kube/worker"
)

// Defaults of Options.
const (
	// DefaultHeartbeatTimeout: the node agent beats every minute (plus up
	// to 20% jitter), so five missed beats.
	DefaultHeartbeatTimeout = 5 * time.Minute
	// DefaultRecheckInterval is how often a stale node whose VMIs still
	// have live launcher Pods is looked at again.
	DefaultRecheckInterval = 30 * time.Second
)

// ReasonNodeUnresponsive is the VMI status reason (and event reason) of a
// VMI failed because its node stopped beating.
const ReasonNodeUnresponsive = "NodeUnresponsive"

// vmiNodeIndex indexes VMIs by status.nodeName.
const vmiNodeIndex = "kemu.dev/node"

// Options tune the controller. The zero value is the default.
type Options struct {
	// HeartbeatTimeout is the age after which a heartbeat is stale.
	HeartbeatTimeout time.Duration
	// RecheckInterval: see DefaultRecheckInterval.
	RecheckInterval time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

func (o *Options) defaults() {
	if o.HeartbeatTimeout <= 0 {
		o.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	if o.RecheckInterval <= 0 {
		o.RecheckInterval = DefaultRecheckInterval
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Controller watches node heartbeats.
type Controller struct {
	kube     kubernetes.Interface
	kemu     versioned.Interface
	recorder record.EventRecorder
	opts     Options

	nodeLister corelisters.NodeLister
	vmiIndexer cache.Indexer
	synced     []cache.InformerSynced
	factories  []interface{ Start(<-chan struct{}) }
	queue      workqueue.TypedRateLimitingInterface[string]
	runOnce    sync.Once
}

// New builds a node controller on the given informer factories (it adds a
// node-name index to the VMI informer, so call it before the factories
// start); Run starts them. The recorder's scheme must know
// kemu.dev/v1alpha1 (v1alpha1.AddToScheme), as events are also about VMIs.
func New(kube kubernetes.Interface, kemu versioned.Interface, kubeInformers kubeinformers.SharedInformerFactory,
	kemuInformers kemuinformers.SharedInformerFactory, recorder record.EventRecorder, opts Options) (*Controller, error) {
	if kube == nil || kemu == nil || kubeInformers == nil || kemuInformers == nil || recorder == nil {
		return nil, errors.New("node controller: clients, informer factories and recorder are required")
	}
	opts.defaults()
	nodes := kubeInformers.Core().V1().Nodes()
	vmis := kemuInformers.Kemu().V1alpha1().VirtualMachineInstances().Informer()
	if err := vmis.AddIndexers(cache.Indexers{vmiNodeIndex: func(obj any) ([]string, error) {
		if vmi, ok := obj.(*v1.VirtualMachineInstance); ok && vmi.Status.NodeName != "" {
			return []string{vmi.Status.NodeName}, nil
		}
		return nil, nil
	}}); err != nil {
		return nil, fmt.Errorf("node controller: VMI index: %w", err)
	}
	c := &Controller{
		kube:       kube,
		kemu:       kemu,
		recorder:   recorder,
		opts:       opts,
		nodeLister: nodes.Lister(),
		vmiIndexer: vmis.GetIndexer(),
		synced:     []cache.InformerSynced{nodes.Informer().HasSynced, vmis.HasSynced},
		factories:  []interface{ Start(<-chan struct{}) }{kubeInformers, kemuInformers},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "kemu-node"}),
	}
	enqueueNode := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	if _, err := nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueueNode,
		UpdateFunc: func(_, cur any) { enqueueNode(cur) },
		DeleteFunc: enqueueNode,
	}); err != nil {
		return nil, fmt.Errorf("node controller: %w", err)
	}
	// A VMI landing on a node wakes the node up: it may be stale already.
	enqueueVMINode := func(obj any) {
		if vmi, ok := obj.(*v1.VirtualMachineInstance); ok && vmi.Status.NodeName != "" && !vmi.Status.Phase.IsFinal() {
			c.queue.Add(vmi.Status.NodeName)
		}
	}
	if _, err := vmis.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueueVMINode,
		UpdateFunc: func(old, cur any) {
			if old.(*v1.VirtualMachineInstance).Status.NodeName != cur.(*v1.VirtualMachineInstance).Status.NodeName {
				enqueueVMINode(cur)
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("node controller: %w", err)
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
	klog.InfoS("Starting node controller", "workers", workers, "heartbeatTimeout", c.opts.HeartbeatTimeout)
	if !cache.WaitForNamedCacheSync("kemu-node", ctx.Done(), c.synced...) {
		return errors.New("node controller: informer caches did not sync")
	}
	worker.Run(ctx, c.queue, workers, "node", c.sync)
	klog.InfoS("Stopped node controller")
	return nil
}
