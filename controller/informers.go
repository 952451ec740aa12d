// Package controller holds what kemu's cluster-wide controllers share: the
// informer factories of one process and the Runnable shape every controller
// has (New(...) + Run(ctx, workers) blocking until ctx ends).
package controller

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	kemuinformers "github.com/kemu-dev/kemu/api/client/informers/externalversions"
	"github.com/kemu-dev/kemu/api/launcherpod"
	"github.com/kemu-dev/kemu/kube/cdi"
)

// Runnable is a controller: Run blocks until ctx ends (after the controller's
// caches synced and its workers stopped) and returns nil then, or an error
// when it cannot start.
type Runnable interface {
	Run(ctx context.Context, workers int) error
}

// Informers are the shared informer factories of one controller process.
// Every controller takes its informers from here so each resource is
// watched once.
type Informers struct {
	// Kube watches Kubernetes objects (nodes, PVCs, ...) in Namespace (nodes
	// cluster-wide).
	Kube informers.SharedInformerFactory
	// LauncherPods watches only launcher Pods (kemu.dev/app=launcher).
	LauncherPods informers.SharedInformerFactory
	// Kemu watches kemu.dev objects.
	Kemu kemuinformers.SharedInformerFactory
	// DataVolumes follows CDI's DataVolumes while CDI's API is installed
	// (nil until WatchDataVolumes).
	DataVolumes *cdi.Watcher

	namespace string
	resync    time.Duration
}

// WatchDataVolumes sets DataVolumes: a Watcher of the informers' namespace
// and resync, asking discovery every recheck (cdi.DefaultRecheck when 0).
func (i *Informers) WatchDataVolumes(kube kubernetes.Interface, dyn dynamic.Interface, recheck time.Duration) *cdi.Watcher {
	i.DataVolumes = cdi.NewWatcher(kube.Discovery(), dyn, i.namespace, i.resync, recheck)
	return i.DataVolumes
}

// NewInformers returns factories for namespace ("" = all namespaces) with
// the given resync period (0 = none).
func NewInformers(kube kubernetes.Interface, kemu versioned.Interface, namespace string, resync time.Duration) *Informers {
	return &Informers{
		Kube: informers.NewSharedInformerFactoryWithOptions(kube, resync, informers.WithNamespace(namespace)),
		LauncherPods: informers.NewSharedInformerFactoryWithOptions(kube, resync, informers.WithNamespace(namespace),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.LabelSelector = launcherpod.AppLabel + "=" + launcherpod.AppLauncher
			})),
		Kemu:      kemuinformers.NewSharedInformerFactoryWithOptions(kemu, resync, kemuinformers.WithNamespace(namespace)),
		namespace: namespace,
		resync:    resync,
	}
}

// Start starts every informer requested so far (call it after the
// controllers are built).
func (i *Informers) Start(ctx context.Context) {
	i.Kube.Start(ctx.Done())
	i.LauncherPods.Start(ctx.Done())
	i.Kemu.Start(ctx.Done())
	if i.DataVolumes != nil {
		go i.DataVolumes.Run(ctx)
	}
}

// Shutdown stops the informers and waits for them (after ctx of Start
// ended; the DataVolumes Watcher stops with that ctx).
func (i *Informers) Shutdown() {
	i.Kube.Shutdown()
	i.LauncherPods.Shutdown()
	i.Kemu.Shutdown()
}
