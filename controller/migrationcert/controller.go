// Package migrationcert is kemu's migration certificate signer: it
// approves or denies the CertificateSigningRequests of signer
// kemu.dev/migration (migrationca.ReviewRequest: the node agent of a node
// asks for that node's identity only) and signs the approved ones with the
// migration CA, which it keeps in a Secret only it reads; it publishes the
// CA bundle (public) in a ConfigMap for the node agents. See
// docs/deploy.md.
package migrationcert

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	certlisters "k8s.io/client-go/listers/certificates/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/kube/migrationca"
	"github.com/kemu-dev/kemu/kube/worker"
)

// Config of the signer.
type Config struct {
	Client kubernetes.Interface
	// Namespace is kemu's namespace: the CA Secret and ConfigMap live
	// there, and the node agent's ServiceAccount is its.
	Namespace string
	// Resync is the informer's resync period (0: none).
	Resync time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Controller signs node certificates.
type Controller struct {
	cfg     Config
	factory informers.SharedInformerFactory
	lister  certlisters.CertificateSigningRequestLister
	synced  cache.InformerSynced
	queue   workqueue.TypedRateLimitingInterface[string]
	// ca is the CA once loaded from (or created in) its Secret.
	ca      atomic.Pointer[migrationca.CA]
	runOnce sync.Once
}

// New builds the signer on its own informer, which watches only requests
// of signer kemu.dev/migration (field selector spec.signerName).
func New(cfg Config) (*Controller, error) {
	if cfg.Client == nil || cfg.Namespace == "" {
		return nil, errors.New("migration certificate signer: client and namespace are required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	factory := informers.NewSharedInformerFactoryWithOptions(cfg.Client, cfg.Resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.signerName", migrationca.SignerName).String()
		}))
	csrs := factory.Certificates().V1().CertificateSigningRequests()
	c := &Controller{
		cfg:     cfg,
		factory: factory,
		lister:  csrs.Lister(),
		synced:  csrs.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "kemu-migration-cert"}),
	}
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	if _, err := csrs.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return nil, fmt.Errorf("migration certificate signer: event handler: %w", err)
	}
	return c, nil
}

// Run loads the CA (creating its Secret when absent) and publishes its
// bundle, then reconciles requests with workers until ctx ends. Requests
// wait in the queue until the CA is there.
func (c *Controller) Run(ctx context.Context, workers int) error {
	started := false
	c.runOnce.Do(func() { started = true })
	if !started {
		return errors.New("migration certificate signer: Run called twice")
	}
	defer utilruntime.HandleCrash()
	logger := klog.FromContext(ctx).WithValues("controller", "migration-cert")
	ctx = klog.NewContext(ctx, logger)
	c.factory.Start(ctx.Done())
	defer c.factory.Shutdown()
	go c.ensureCA(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), c.synced) {
		return nil // ctx ended
	}
	logger.Info("Migration certificate signer started", "signer", migrationca.SignerName, "namespace", c.cfg.Namespace)
	worker.Run(ctx, c.queue, workers, "migration-cert", c.sync)
	return nil
}
