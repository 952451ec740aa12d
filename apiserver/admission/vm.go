package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kemu-dev/kemu/api/instancetype"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/api/validation"
	"github.com/kemu-dev/kemu/kube/cdi"
	"github.com/kemu-dev/kemu/kube/instancetypes"
)

// validateVM validates a new VM, and an updated one whose spec changed (a
// metadata-only update, such as the controller's finalizer removal, passes
// even for a VM stored before the webhook existed). The VM is not mutated:
// its readers default it, and the VMI it starts has its defaults stored by
// the VMI mutator (docs/decisions.md).
func (c Config) validateVM(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if err := checkKind(req, vmKind); err != nil {
		return deny(err)
	}
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return allow()
	}
	var vm v1.VirtualMachine
	if err := decode(req.Object, "object", &vm); err != nil {
		return deny(err)
	}
	templatesChanged := len(vm.Spec.DataVolumeTemplates) > 0
	if req.Operation == admissionv1.Update {
		var old v1.VirtualMachine
		if err := decode(req.OldObject, "oldObject", &old); err != nil {
			return deny(err)
		}
		if apiequality.Semantic.DeepEqual(old.Spec, vm.Spec) {
			return allow()
		}
		templatesChanged = templatesChanged && !apiequality.Semantic.DeepEqual(old.Spec.DataVolumeTemplates, vm.Spec.DataVolumeTemplates)
	}
	if templatesChanged && c.CDIInstalled != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		installed, err := c.CDIInstalled(ctx)
		cancel()
		if err != nil {
			return deny(fmt.Errorf("spec.dataVolumeTemplates: cannot tell whether CDI's API is installed: %w", err))
		}
		if !installed {
			return invalid(vmKind, vm.Name, field.ErrorList{field.Forbidden(field.NewPath("spec", "dataVolumeTemplates"),
				fmt.Sprintf("CDI's API (%s %s) is not installed in the cluster: kemu cannot create DataVolumes", cdi.GroupVersion, cdi.Resource))})
		}
	}
	if vm.Name == "" {
		vm.Name = req.Name
	}
	if vm.Namespace == "" {
		vm.Namespace = req.Namespace
	}
	var written map[string]any
	if err := json.Unmarshal(req.Object.Raw, &written); err != nil {
		return deny(fmt.Errorf("decoding the request's object: %w", err))
	}
	if errs := c.expandVM(&vm); len(errs) > 0 {
		return invalid(vmKind, vm.Name, errs)
	}
	v1.SetVirtualMachineDefaults(&vm)
	errs := validation.AsWritten(validation.ValidateVirtualMachine(&vm), &vm, written)
	return invalid(vmKind, vm.Name, append(errs, validation.ValidateForCluster(&vm)...))
}

// expandVM expands the VM's template with its instance type and preference
// as the VM controller will (KubeVirt's VM admission): a conflict, an unmet
// requirement or a failed inference refuses the VM naming the field. An
// instance type or preference that does not exist yet is let through, as
// in KubeVirt: the VM controller reports it while it is missing.
func (c Config) expandVM(vm *v1.VirtualMachine) field.ErrorList {
	if c.Instancetypes == nil || vm.Spec.Template == nil || (vm.Spec.Instancetype == nil && vm.Spec.Preference == nil) {
		return nil
	}
	if errs := validation.ValidateMatchers(vm, field.NewPath("spec")); len(errs) > 0 {
		return nil // the matchers themselves are wrong: validation reports it
	}
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	r, err := c.Instancetypes.Resolve(ctx, vm)
	var e *instancetypes.Error
	switch {
	case errors.As(err, &e) && e.NotFound:
		return nil
	case errors.As(err, &e) && e.Reason == instancetypes.ReasonFailedFindPreference:
		return field.ErrorList{field.Invalid(field.NewPath("spec", "preference"), vm.Spec.Preference, err.Error())}
	case err != nil:
		return field.ErrorList{field.Invalid(field.NewPath("spec", "instancetype"), vm.Spec.Instancetype, err.Error())}
	}
	t := vm.Spec.Template
	if r.DropTemplateMemory {
		t.Spec.Domain.Memory = nil
	}
	if errs := instancetype.Apply(r.Instancetype, r.Preference, &t.Spec, &t.ObjectMeta); len(errs) > 0 {
		return errs
	}
	return nil
}

// lookupTimeout bounds the reads of instance types, preferences, revisions
// and claims within the webhook's own timeout (10 s, deploy/base/webhooks.yaml).
const lookupTimeout = 5 * time.Second
