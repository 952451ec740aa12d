package admission

import (
	admissionv1 "k8s.io/api/admission/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/api/validation"
)

// validateVMIM refuses a migration the controller would refuse on
// structure, and any change of its spec (a migration is a one-shot request;
// the CRD's self == oldSelf on vmiName says so too, without the webhook).
func validateVMIM(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if err := checkKind(req, vmimKind); err != nil {
		return deny(err)
	}
	var m v1.VirtualMachineInstanceMigration
	switch req.Operation {
	case admissionv1.Create:
		if err := decode(req.Object, "object", &m); err != nil {
			return deny(err)
		}
		return invalid(vmimKind, m.Name, validation.ValidateVirtualMachineInstanceMigration(&m))
	case admissionv1.Update:
		var old v1.VirtualMachineInstanceMigration
		if err := decode(req.Object, "object", &m); err != nil {
			return deny(err)
		}
		if err := decode(req.OldObject, "oldObject", &old); err != nil {
			return deny(err)
		}
		if !apiequality.Semantic.DeepEqual(old.Spec, m.Spec) {
			return invalid(vmimKind, m.Name, field.ErrorList{field.Forbidden(field.NewPath("spec"),
				"a VirtualMachineInstanceMigration's spec is immutable; create a new migration")})
		}
		return allow()
	default:
		return allow()
	}
}
