package migration

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// pruneFinished deletes the finished migrations of m's VMI beyond the
// KeepFinished newest.
func (c *Controller) pruneFinished(ctx context.Context, m *v1.VirtualMachineInstanceMigration) error {
	all, err := c.migLister.VirtualMachineInstanceMigrations(m.Namespace).List(everything)
	if err != nil {
		return err
	}
	var errs []error
	for _, o := range surplus(all, m.Spec.VMIName, KeepFinished) {
		uid := o.UID
		err := c.cfg.KemuClient.KemuV1alpha1().VirtualMachineInstanceMigrations(o.Namespace).Delete(ctx, o.Name,
			metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("deleting finished migrations of VMI %s/%s: %v", m.Namespace, m.Spec.VMIName, errs)
	}
	return nil
}

// surplus are the finished migrations of vmiName (not being deleted) beyond
// the keep newest.
func surplus(all []*v1.VirtualMachineInstanceMigration, vmiName string, keep int) []*v1.VirtualMachineInstanceMigration {
	var done []*v1.VirtualMachineInstanceMigration
	for _, o := range all {
		if o.Spec.VMIName == vmiName && o.Status.Phase.IsFinal() && o.DeletionTimestamp == nil {
			done = append(done, o)
		}
	}
	if len(done) <= keep {
		return nil
	}
	slices.SortFunc(done, func(a, b *v1.VirtualMachineInstanceMigration) int {
		switch {
		case older(b, a):
			return -1 // newest first
		case older(a, b):
			return 1
		}
		return 0
	})
	return done[keep:]
}
