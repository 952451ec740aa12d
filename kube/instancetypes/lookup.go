// Package instancetypes finds what a VirtualMachine's spec.instancetype and
// spec.preference refer to: a pinned ControllerRevision, the revision the
// VM already started from (status.instancetypeRef, status.preferenceRef), or
// the live object, named or inferred from a persistentVolumeClaim's labels;
// and it keeps the live object's spec in a ControllerRevision owned by the
// VM. The VM controller and kemu-api's VM admission share it; expansion
// itself is api/instancetype. See docs/vm.md.
package instancetypes

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	itlisters "github.com/kemu-dev/kemu/api/client/listers/instancetype/v1beta1"
	itv1beta1 "github.com/kemu-dev/kemu/api/instancetype/v1beta1"
)

// Lookup reads instance types, preferences, ControllerRevisions and claims.
// The listers are optional: each read tries its lister first and asks the
// API server when the lister has no such object (a revision just created is
// not in the cache yet).
type Lookup struct {
	Kube kubernetes.Interface
	Kemu versioned.Interface

	Instancetypes        itlisters.VirtualMachineInstancetypeLister
	ClusterInstancetypes itlisters.VirtualMachineClusterInstancetypeLister
	Preferences          itlisters.VirtualMachinePreferenceLister
	ClusterPreferences   itlisters.VirtualMachineClusterPreferenceLister
	Revisions            appslisters.ControllerRevisionLister
	Claims               corelisters.PersistentVolumeClaimLister
}

// cached returns the lister's object, or calls get when there is no lister
// or it does not have the object.
func cached[T any](fromLister func() (T, error), hasLister bool, get func() (T, error)) (T, error) {
	if hasLister {
		obj, err := fromLister()
		if err == nil || !apierrors.IsNotFound(err) {
			return obj, err
		}
	}
	return get()
}

// object returns an instance type or preference of the given kind, with
// its TypeMeta set (revisions keep it).
func (l *Lookup) object(ctx context.Context, namespace, kind, name string) (runtime.Object, error) {
	var obj runtime.Object
	var err error
	it := l.Kemu.InstancetypeV1beta1()
	get := metav1.GetOptions{}
	switch kind {
	case itv1beta1.KindInstancetype:
		obj, err = cached(func() (*itv1beta1.VirtualMachineInstancetype, error) {
			return l.Instancetypes.VirtualMachineInstancetypes(namespace).Get(name)
		}, l.Instancetypes != nil, func() (*itv1beta1.VirtualMachineInstancetype, error) {
			return it.VirtualMachineInstancetypes(namespace).Get(ctx, name, get)
		})
	case itv1beta1.KindClusterInstancetype:
		obj, err = cached(func() (*itv1beta1.VirtualMachineClusterInstancetype, error) {
			return l.ClusterInstancetypes.Get(name)
		}, l.ClusterInstancetypes != nil, func() (*itv1beta1.VirtualMachineClusterInstancetype, error) {
			return it.VirtualMachineClusterInstancetypes().Get(ctx, name, get)
		})
	case itv1beta1.KindPreference:
		obj, err = cached(func() (*itv1beta1.VirtualMachinePreference, error) {
			return l.Preferences.VirtualMachinePreferences(namespace).Get(name)
		}, l.Preferences != nil, func() (*itv1beta1.VirtualMachinePreference, error) {
			return it.VirtualMachinePreferences(namespace).Get(ctx, name, get)
		})
	case itv1beta1.KindClusterPreference:
		obj, err = cached(func() (*itv1beta1.VirtualMachineClusterPreference, error) {
			return l.ClusterPreferences.Get(name)
		}, l.ClusterPreferences != nil, func() (*itv1beta1.VirtualMachineClusterPreference, error) {
			return it.VirtualMachineClusterPreferences().Get(ctx, name, get)
		})
	}
	if err != nil {
		return nil, err
	}
	obj = obj.DeepCopyObject()
	obj.GetObjectKind().SetGroupVersionKind(itv1beta1.SchemeGroupVersion.WithKind(kind))
	return obj, nil
}

func (l *Lookup) revision(ctx context.Context, namespace, name string) (*appsv1.ControllerRevision, error) {
	return cached(func() (*appsv1.ControllerRevision, error) {
		return l.Revisions.ControllerRevisions(namespace).Get(name)
	}, l.Revisions != nil, func() (*appsv1.ControllerRevision, error) {
		return l.Kube.AppsV1().ControllerRevisions(namespace).Get(ctx, name, metav1.GetOptions{})
	})
}

func (l *Lookup) claim(ctx context.Context, namespace, name string) (*corev1.PersistentVolumeClaim, error) {
	return cached(func() (*corev1.PersistentVolumeClaim, error) {
		return l.Claims.PersistentVolumeClaims(namespace).Get(name)
	}, l.Claims != nil, func() (*corev1.PersistentVolumeClaim, error) {
		return l.Kube.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, name, metav1.GetOptions{})
	})
}
