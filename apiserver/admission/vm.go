package admission

import (
	"encoding/json"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/api/validation"
)

// validateVM validates a new VM, and an updated one whose spec changed (a
// metadata-only update, such as the controller's finalizer removal, passes
// even for a VM stored before the webhook existed). The VM is not mutated:
// its readers default it, and the VMI it starts has its defaults stored by
// the VMI mutator (docs/decisions.md).
func validateVM(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
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
	if req.Operation == admissionv1.Update {
		var old v1.VirtualMachine
		if err := decode(req.OldObject, "oldObject", &old); err != nil {
			return deny(err)
		}
		if apiequality.Semantic.DeepEqual(old.Spec, vm.Spec) {
			return allow()
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
	v1.SetVirtualMachineDefaults(&vm)
	return invalid(vmKind, vm.Name, validation.AsWritten(validation.ValidateVirtualMachine(&vm), &vm, written))
}
