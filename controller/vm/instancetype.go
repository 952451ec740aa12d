package vm

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kemu-dev/kemu/api/instancetype"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/kube/instancetypes"
)

// expansion is what the VM's matchers resolved to, or why they did not.
type expansion struct {
	resolved *instancetypes.Resolved
	err      *syncError
}

// hasMatchers says whether the VM references an instance type or preference.
func hasMatchers(vm *v1.VirtualMachine) bool {
	return vm.Spec.Instancetype != nil || vm.Spec.Preference != nil
}

// instancetypes resolves the VM's instance type and preference, keeps the
// live objects in ControllerRevisions and records them in the VM's status
// (KubeVirt's status.instancetypeRef and preferenceRef), so the VM's next
// VMIs are expanded from what it first used until the reference changes
// or is cleared. A conflict with the VM found before anything is kept is a
// failure of the VM, as in KubeVirt.
func (c *Controller) instancetypes(ctx context.Context, vm *v1.VirtualMachine) (*v1.VirtualMachine, expansion, error) {
	r, err := c.lookup.Resolve(ctx, vm)
	if err != nil {
		return vm, expansion{err: instancetypeSyncError(err)}, nil
	}
	if _, errs := expandVMI(vm, r); len(errs) > 0 {
		return vm, expansion{err: conflictError(errs)}, nil
	}
	if err := c.lookup.Store(ctx, vm, r); err != nil {
		return vm, expansion{err: instancetypeSyncError(err)}, nil
	}
	if equality.Semantic.DeepEqual(vm.Status.InstancetypeRef, r.InstancetypeRef) &&
		equality.Semantic.DeepEqual(vm.Status.PreferenceRef, r.PreferenceRef) {
		return vm, expansion{resolved: r}, nil
	}
	upd := vm.DeepCopy()
	upd.Status.InstancetypeRef, upd.Status.PreferenceRef = r.InstancetypeRef, r.PreferenceRef
	written, err := c.kemu.KemuV1alpha1().VirtualMachines(vm.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		return vm, expansion{}, fmt.Errorf("recording the instance type and preference revisions: %w", err)
	}
	return written, expansion{resolved: r}, nil
}

func instancetypeSyncError(err error) *syncError {
	var e *instancetypes.Error
	if errors.As(err, &e) {
		return &syncError{e.Reason, e.Error()}
	}
	return &syncError{ReasonFailedCreate, err.Error()}
}

// conflictError is KubeVirt's report of a VM that sets what its instance
// type sets: reason FailedCreate, the fields named.
func conflictError(errs field.ErrorList) *syncError {
	return &syncError{ReasonFailedCreate, "the VM conflicts with its instance type or preference: " + errs.ToAggregate().Error()}
}

// expandVMI renders the VM's VMI expanded with r (nil: none): the template
// as written (without defaults, which would conflict) with the instance
// type applied and the preference filling what is left unset.
func expandVMI(vm *v1.VirtualMachine, r *instancetypes.Resolved) (*v1.VirtualMachineInstance, field.ErrorList) {
	vmi := newVMI(vm)
	if r == nil {
		return vmi, nil
	}
	if r.DropTemplateMemory {
		vmi.Spec.Domain.Memory = nil
	}
	if errs := instancetype.Apply(r.Instancetype, r.Preference, &vmi.Spec, &vmi.ObjectMeta); len(errs) > 0 {
		return nil, errs
	}
	return vmi, nil
}

// recordFailure sends the Warning event of a resolution or conflict failure.
func (c *Controller) recordFailure(vm *v1.VirtualMachine, e *syncError) {
	c.recorder.Event(vm, corev1.EventTypeWarning, e.reason, e.message)
}
