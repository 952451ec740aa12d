package cdi

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// DefaultRecheck is how often a Watcher asks discovery again.
const DefaultRecheck = 30 * time.Second

// ErrNotReady: the Watcher has not yet learnt whether CDI is installed, or
// its DataVolume cache has not synced.
var ErrNotReady = errors.New("CDI's DataVolume cache is not ready")

// Watcher follows whether CDI's API is installed (discovery, every recheck
// period and on Recheck) and, while it is, keeps an informer of
// DataVolumes whose events go to the handlers added before Run. When CDI
// appears or goes, the informer is started or stopped and the OnChange
// functions are called (once the new informer has synced).
type Watcher struct {
	disc      discovery.DiscoveryInterface
	dyn       dynamic.Interface
	namespace string
	resync    time.Duration
	recheck   time.Duration
	kick      chan struct{}

	mu        sync.Mutex
	handlers  []cache.ResourceEventHandler
	onChange  []func()
	known     bool // a discovery answered at least once
	installed bool
	informer  cache.SharedIndexInformer
	stop      context.CancelFunc
}

// NewWatcher watches DataVolumes in namespace ("" = all) with the given
// informer resync (0 = none), asking discovery every recheck
// (DefaultRecheck when 0).
func NewWatcher(disc discovery.DiscoveryInterface, dyn dynamic.Interface, namespace string, resync, recheck time.Duration) *Watcher {
	if recheck <= 0 {
		recheck = DefaultRecheck
	}
	return &Watcher{disc: disc, dyn: dyn, namespace: namespace, resync: resync, recheck: recheck,
		kick: make(chan struct{}, 1)}
}

// AddEventHandler registers h for the DataVolume informer's events (objects
// are *unstructured.Unstructured; FromUnstructured reads them). Call it
// before Run.
func (w *Watcher) AddEventHandler(h cache.ResourceEventHandler) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.handlers = append(w.handlers, h)
}

// OnChange registers f, called when CDI's installation is first learnt and
// whenever it changes. Call it before Run.
func (w *Watcher) OnChange(f func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.onChange = append(w.onChange, f)
}

// Recheck asks discovery again now (after an error that suggests CDI went
// or came: a DataVolume create answered NotFound).
func (w *Watcher) Recheck() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Run asks discovery until ctx ends, then stops the informer.
func (w *Watcher) Run(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			w.mu.Lock()
			if w.stop != nil {
				w.stop()
			}
			w.mu.Unlock()
			return
		case <-t.C:
		case <-w.kick:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		}
		w.check(ctx)
		t.Reset(w.recheck)
	}
}

func (w *Watcher) check(ctx context.Context) {
	logger := klog.FromContext(ctx)
	ok, err := Installed(ctx, w.disc)
	if err != nil {
		logger.Error(err, "Asking whether CDI is installed; keeping what was known", "installed", w.isInstalled())
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	first := !w.known
	w.known = true
	if ok == w.installed && !first {
		return
	}
	w.installed = ok
	callbacks := append([]func(){}, w.onChange...)
	if !ok {
		if w.stop != nil {
			w.stop()
			w.stop, w.informer = nil, nil
		}
		logger.Info("CDI's API is not installed", "groupVersion", GroupVersion.String(), "resource", Resource)
		go notify(callbacks)
		return
	}
	logger.Info("CDI's API is installed: watching DataVolumes", "groupVersion", GroupVersion.String())
	inf := dynamicinformer.NewFilteredDynamicInformer(w.dyn, GVR, w.namespace, w.resync,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}, nil).Informer()
	for _, h := range w.handlers {
		if _, err := inf.AddEventHandler(h); err != nil {
			logger.Error(err, "Adding a DataVolume event handler")
		}
	}
	ictx, cancel := context.WithCancel(ctx)
	w.informer, w.stop = inf, cancel
	go inf.RunWithContext(ictx)
	go func() {
		if cache.WaitForCacheSync(ictx.Done(), inf.HasSynced) {
			notify(callbacks)
		}
	}()
}

func notify(fs []func()) {
	for _, f := range fs {
		f()
	}
}

func (w *Watcher) isInstalled() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.installed
}

// State says whether CDI's API is installed, as last discovered, and
// whether that is known: ready is false before the first answer and while
// a new DataVolume informer has not synced.
func (w *Watcher) State() (installed, ready bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.known {
		return false, false
	}
	if !w.installed {
		return false, true
	}
	return true, w.informer != nil && w.informer.HasSynced()
}

// Resource is the dynamic client of DataVolumes (creates and patches).
func (w *Watcher) Resource() dynamic.NamespaceableResourceInterface {
	return w.dyn.Resource(GVR)
}

// Get returns the DataVolume namespace/name from the cache; ok is false
// when there is none. It fails with ErrNotReady unless State says CDI is
// installed and ready.
func (w *Watcher) Get(namespace, name string) (dv *DataVolume, ok bool, err error) {
	w.mu.Lock()
	inf := w.informer
	w.mu.Unlock()
	if inf == nil || !inf.HasSynced() {
		return nil, false, ErrNotReady
	}
	obj, exists, err := inf.GetIndexer().GetByKey(namespace + "/" + name)
	if err != nil || !exists {
		return nil, false, err
	}
	u, isU := obj.(*unstructured.Unstructured)
	if !isU {
		return nil, false, fmt.Errorf("DataVolume cache holds a %T", obj)
	}
	return FromUnstructured(u), true, nil
}
