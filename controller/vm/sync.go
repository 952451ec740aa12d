package vm

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/api/validation"
	"github.com/kemu-dev/kemu/kube/instancetypes"
	"github.com/kemu-dev/kemu/kube/status"
)

var vmKind = v1.SchemeGroupVersion.WithKind("VirtualMachine")

// sync reconciles one VM: its VMI, then its status.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	cached, err := c.vmLister.VirtualMachines(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.expectations.Delete(key)
		return nil
	}
	if err != nil {
		return err
	}
	vm := cached.DeepCopy()
	rs := runStrategyOf(vm)

	vmi, syncErr, err := c.ownVMI(ctx, vm)
	if err != nil {
		return err
	}
	var exp expansion
	if syncErr == nil && hasMatchers(vm) && vm.DeletionTimestamp == nil {
		if vm, exp, err = c.instancetypes(ctx, vm); err != nil {
			return err
		}
	}
	dvReady := true
	if syncErr == nil && len(vm.Spec.DataVolumeTemplates) > 0 && vm.DeletionTimestamp == nil {
		// KubeVirt's order: the DataVolumes are created whatever the run
		// strategy, and a VMI is created only once they are ready.
		if dvReady, syncErr, err = c.dataVolumesReady(ctx, key, vm); err != nil {
			return err
		}
	}
	switch {
	case syncErr != nil:
	case !dvReady && vmi == nil:
		klog.V(3).InfoS("Waiting for DataVolumes to be ready", "vm", klog.KObj(vm))
	case !c.expectations.Satisfied(key):
		// The informer's event for the pending create or delete requeues
		// the VM; this only guards against a lost one.
		c.queue.AddAfter(key, ExpectationsTimeout)
	default:
		if vm, syncErr, err = c.reconcile(ctx, key, vm, rs, vmi, exp); err != nil {
			return err
		}
	}
	if syncErr == nil && exp.err != nil {
		// Reported even when nothing is to be started now, as KubeVirt does.
		syncErr = exp.err
	}
	if err := c.updateStatus(ctx, key, vm, vmi, syncErr); err != nil {
		return err
	}
	if syncErr != nil && syncErr.reason != ReasonVMIConflict && syncErr.reason != ReasonInvalidTemplate &&
		syncErr.reason != ReasonCDINotInstalled && syncErr.reason != ReasonDataVolumeConflict {
		// (CDI appearing, and DataVolume events, requeue the others.)
		return syncErr // retried with the queue's back-off
	}
	return nil
}

// ownVMI returns the VM's VMI from the cache: nil when there is none, an
// orphan adopted, and a syncError when another owner controls it.
func (c *Controller) ownVMI(ctx context.Context, vm *v1.VirtualMachine) (*v1.VirtualMachineInstance, *syncError, error) {
	vmi, err := c.vmiLister.VirtualMachineInstances(vm.Namespace).Get(vm.Name)
	if apierrors.IsNotFound(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	ref := metav1.GetControllerOf(vmi)
	switch {
	case ref != nil && ref.UID == vm.UID:
		return vmi, nil, nil
	case ref != nil:
		return nil, &syncError{ReasonVMIConflict, fmt.Sprintf("VMI %s/%s is controlled by %s %s, not by this VM",
			vmi.Namespace, vmi.Name, ref.Kind, ref.Name)}, nil
	case vm.DeletionTimestamp != nil || vmi.DeletionTimestamp != nil:
		return nil, nil, nil
	}
	// An orphan of the VM's name: adopt it, as KubeVirt does.
	refs := append(slices.Clone(vmi.OwnerReferences), *metav1.NewControllerRef(vm, vmKind))
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/uid", "value": vmi.UID},
		{"op": "test", "path": "/metadata/resourceVersion", "value": vmi.ResourceVersion},
		{"op": "add", "path": "/metadata/ownerReferences", "value": refs},
	})
	if err != nil {
		return nil, nil, err
	}
	adopted, err := c.kemu.KemuV1alpha1().VirtualMachineInstances(vm.Namespace).Patch(ctx, vmi.Name,
		types.JSONPatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("adopting VMI %s: %w", vmi.Name, err)
	}
	klog.InfoS("Adopted orphan VMI", "vm", klog.KObj(vm))
	return adopted, nil, nil
}

// reconcile records a failed start, then creates or deletes the VMI as the
// run strategy says. It returns the VM as last written.
func (c *Controller) reconcile(ctx context.Context, key string, vm *v1.VirtualMachine, rs v1.VirtualMachineRunStrategy,
	vmi *v1.VirtualMachineInstance, exp expansion) (*v1.VirtualMachine, *syncError, error) {
	now := c.opts.Now()
	sf := StartFailureOf(vm)
	next := nextStartFailure(rs, sf, vmi, now, c.backoff.delayFunc())
	if next != sf {
		var err error
		if vm, err = c.writeStartFailure(ctx, vm, next); err != nil {
			return vm, nil, err
		}
		if next != nil {
			c.recorder.Eventf(vm, corev1.EventTypeWarning, ReasonBackoff,
				"VMI %s failed to start (%d in a row): next start not before %s",
				vmi.Name, next.ConsecutiveFailCount, next.RetryAfter.Format("15:04:05"))
		}
	}

	d := decide(rs, vm, vmi, next, now)
	klog.V(4).InfoS("Reconciling VM", "vm", klog.KObj(vm), "runStrategy", rs, "action", d.action)
	switch d.action {
	case actWait:
		c.queue.AddAfter(key, d.wait)
	case actCreate:
		if exp.err != nil {
			c.recordFailure(vm, exp.err)
			return vm, exp.err, nil
		}
		return vm, c.createVMI(ctx, key, vm, exp.resolved), nil
	case actDelete:
		if d.startAfterDelete {
			var err error
			if vm, err = c.addStartRequest(ctx, vm); err != nil {
				return vm, nil, err
			}
		}
		return vm, c.deleteVMI(ctx, key, vm, vmi), nil
	}
	return vm, nil, nil
}

// newVMI renders the VM's VMI: the template's metadata and spec, the VM's
// name and namespace, the VM as controller.
func newVMI(vm *v1.VirtualMachine) *v1.VirtualMachineInstance {
	t := vm.Spec.Template
	vmi := &v1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{
			Name:            vm.Name,
			Namespace:       vm.Namespace,
			Labels:          t.ObjectMeta.DeepCopy().Labels,
			Annotations:     t.ObjectMeta.DeepCopy().Annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vm, vmKind)},
		},
		Spec: *t.Spec.DeepCopy(),
	}
	return vmi
}

func (c *Controller) createVMI(ctx context.Context, key string, vm *v1.VirtualMachine, r *instancetypes.Resolved) *syncError {
	if vm.Spec.Template == nil {
		c.recorder.Event(vm, corev1.EventTypeWarning, ReasonInvalidTemplate, "spec.template is required")
		return &syncError{ReasonInvalidTemplate, "spec.template is required"}
	}
	vmi, errs := expandVMI(vm, r)
	if len(errs) > 0 {
		e := conflictError(errs)
		c.recordFailure(vm, e)
		return e
	}
	// The VM is judged as it will run: its template expanded.
	defaulted := vm.DeepCopy()
	defaulted.Spec.Template.ObjectMeta = *vmi.ObjectMeta.DeepCopy()
	defaulted.Spec.Template.Spec = *vmi.Spec.DeepCopy()
	v1.SetVirtualMachineDefaults(defaulted)
	if errs := validation.ValidateVirtualMachine(defaulted); len(errs) > 0 {
		msg := "invalid VM: " + errs.ToAggregate().Error()
		c.recorder.Event(vm, corev1.EventTypeWarning, ReasonInvalidTemplate, msg)
		return &syncError{ReasonInvalidTemplate, msg}
	}
	c.expectations.ExpectCreations(key, 1)
	created, err := c.kemu.KemuV1alpha1().VirtualMachineInstances(vm.Namespace).Create(ctx, vmi, metav1.CreateOptions{})
	if err != nil {
		c.expectations.CreationObserved(key)
		c.recorder.Eventf(vm, corev1.EventTypeWarning, ReasonFailedCreate, "Error creating VMI %s: %v", vm.Name, err)
		return &syncError{ReasonFailedCreate, fmt.Sprintf("creating VMI %s: %v", vm.Name, err)}
	}
	klog.InfoS("Created VMI", "vm", klog.KObj(vm), "uid", created.UID)
	c.recorder.Eventf(vm, corev1.EventTypeNormal, ReasonCreated, "Started the virtual machine by creating VMI %s", vm.Name)
	return nil
}

func (c *Controller) deleteVMI(ctx context.Context, key string, vm *v1.VirtualMachine, vmi *v1.VirtualMachineInstance) *syncError {
	c.expectations.ExpectDeletions(key, vmi.UID)
	// The UID precondition: never delete a newer VMI than the one decided on.
	err := c.kemu.KemuV1alpha1().VirtualMachineInstances(vmi.Namespace).Delete(ctx, vmi.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &vmi.UID}})
	if err != nil {
		c.expectations.DeletionObserved(key, vmi.UID)
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil // gone already; the informer will tell
		}
		c.recorder.Eventf(vm, corev1.EventTypeWarning, ReasonFailedDelete, "Error deleting VMI %s: %v", vmi.Name, err)
		return &syncError{ReasonFailedDelete, fmt.Sprintf("deleting VMI %s: %v", vmi.Name, err)}
	}
	klog.InfoS("Deleted VMI", "vm", klog.KObj(vm), "uid", vmi.UID, "phase", vmi.Status.Phase)
	c.recorder.Eventf(vm, corev1.EventTypeNormal, ReasonDeleted, "Stopped the virtual machine by deleting VMI %s (%s)",
		vmi.Name, vmi.Status.Phase)
	return nil
}

// writeStartFailure stores (or, for nil, removes) the start-failure record
// in status.startFailure.
func (c *Controller) writeStartFailure(ctx context.Context, vm *v1.VirtualMachine, sf *StartFailure) (*v1.VirtualMachine, error) {
	upd := vm.DeepCopy()
	upd.Status.StartFailure = apiStartFailure(sf)
	return c.kemu.KemuV1alpha1().VirtualMachines(vm.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
}

// addStartRequest queues a Start request (unless one is queued) so the VM
// starts again once its VMI is deleted.
func (c *Controller) addStartRequest(ctx context.Context, vm *v1.VirtualMachine) (*v1.VirtualMachine, error) {
	for _, r := range vm.Status.StateChangeRequests {
		if r.Action == v1.StartRequest {
			return vm, nil
		}
	}
	upd := vm.DeepCopy()
	upd.Status.StateChangeRequests = append(upd.Status.StateChangeRequests,
		v1.VirtualMachineStateChangeRequest{Action: v1.StartRequest})
	return c.kemu.KemuV1alpha1().VirtualMachines(vm.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
}

// updateStatus writes the VM's derived status if it changed, re-reading the
// VM and deriving again on a conflict.
func (c *Controller) updateStatus(ctx context.Context, key string, vm *v1.VirtualMachine, vmi *v1.VirtualMachineInstance,
	syncErr *syncError) error {
	_, err := status.Update(ctx, c.kemu.KemuV1alpha1().VirtualMachines(vm.Namespace), vm, func(vm *v1.VirtualMachine) {
		creations, deletions := c.expectations.Pending(key)
		st := computeStatus(statusInput{vm: vm, rs: runStrategyOf(vm), vmi: vmi, startPending: creations > 0,
			stopPending: deletions > 0, failure: StartFailureOf(vm), syncErr: syncErr, now: metav1.NewTime(c.opts.Now()),
			dataVolumes: c.templateDataVolumes(vm)})
		st.StartFailure = vm.Status.StartFailure // written by reconcile, kept here
		vm.Status = st
	})
	return err
}
