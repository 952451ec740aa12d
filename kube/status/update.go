// Package status writes objects' status through the status subresource:
// Update applies a mutation and writes only a real change, re-reading the
// object and applying the mutation again on a conflict (client-go's
// retry.RetryOnConflict), so what other writers (the controller, the node
// agent) changed in between is kept. Writes remembers the writes a cache has
// not shown yet.
package status

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
)

// Object is a Kubernetes object pointer (*v1alpha1.VirtualMachineInstance,
// ...).
type Object interface {
	metav1.Object
	runtime.Object
}

// Client reads and writes one namespace's objects of a kind: a typed
// client-go client (VirtualMachineInstances(ns), ...) is one.
type Client[T Object] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// Result says what Update did.
type Result[T Object] struct {
	// Written: a status was written. Before is then the object the write
	// replaced (its resourceVersion, its old status) and After the object
	// the API server returned.
	Written       bool
	Before, After T
	// Conflicts counts the writes that lost to another writer.
	Conflicts int
}

// Update applies mutate to a copy of obj (obj itself, often a cache's, is
// not touched) and, if that changed the object, writes it with UpdateStatus.
// mutate must touch only the status fields its caller owns and be
// idempotent: on a conflict the latest object is read from the API server
// and mutate applied to it again (retry.DefaultRetry's attempts). An object
// that is gone, or was replaced by another of the same name (another UID),
// is not written (no error). A failed write's error says which object.
func Update[T Object](ctx context.Context, c Client[T], obj T, mutate func(T)) (Result[T], error) {
	var res Result[T]
	cur := obj.DeepCopyObject().(T)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if res.Conflicts > 0 { // a retry: start from the latest object
			fresh, err := c.Get(ctx, obj.GetName(), metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return err
			}
			if fresh.GetUID() != obj.GetUID() {
				return nil
			}
			cur = fresh
		}
		before := cur.DeepCopyObject().(T)
		mutate(cur)
		if equality.Semantic.DeepEqual(before, cur) {
			return nil
		}
		after, err := c.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			res.Conflicts++
		}
		if err != nil {
			return err
		}
		res.Written, res.Before, res.After = true, before, after
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("updating the status of %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
	}
	return res, nil
}
