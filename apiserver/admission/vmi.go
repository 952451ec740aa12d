package admission

import (
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/api/validation"
)

// ProtectedAnnotations are the VMI annotations only kemu's service accounts
// may set, change or remove on an existing VMI: the requests kemu-api's
// pause and softreboot subresources make of the node agent, and the node
// agent's answer.
var ProtectedAnnotations = []string{v1.VMIPausedAnnotation, v1.VMISoftRebootAnnotation, v1.VMISoftRebootDoneAnnotation}

// defaultVMI applies the defaults every reader applies, with the request's
// name and namespace when the object has none yet (the firmware UUID is
// derived from them).
func defaultVMI(req *admissionv1.AdmissionRequest, vmi *v1.VirtualMachineInstance) {
	if vmi.Name == "" {
		vmi.Name = req.Name
	}
	if vmi.Namespace == "" {
		vmi.Namespace = req.Namespace
	}
	v1.SetVirtualMachineInstanceDefaults(vmi)
}

func (c Config) validateVMI(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if err := checkKind(req, vmiKind); err != nil {
		return deny(err)
	}
	var vmi v1.VirtualMachineInstance
	switch req.Operation {
	case admissionv1.Create:
		if err := decode(req.Object, "object", &vmi); err != nil {
			return deny(err)
		}
		// The mutator has stored the defaults; defaulting again is a no-op
		// then, and judges the VMI as the controller will if it has not.
		defaultVMI(req, &vmi)
		errs := validation.ValidateVirtualMachineInstance(&vmi)
		errs = append(errs, validation.ValidateForCluster(&vmi)...)
		if c.HostDiskDirs != nil {
			errs = append(errs, validation.ValidateHostDisks(&vmi, c.HostDiskDirs())...)
		}
		if len(errs) == 0 {
			errs = c.serviceAccountAccess(req, &vmi.Spec, field.NewPath("spec"))
		}
		return invalid(vmiKind, vmi.Name, errs)
	case admissionv1.Update:
		var old v1.VirtualMachineInstance
		if err := decode(req.Object, "object", &vmi); err != nil {
			return deny(err)
		}
		if err := decode(req.OldObject, "oldObject", &old); err != nil {
			return deny(err)
		}
		return invalid(vmiKind, vmi.Name, c.validateVMIUpdate(req, &old, &vmi))
	default:
		return allow()
	}
}

// validateVMIUpdate refuses a changed spec (a VMI runs what it was created
// with, as KubeVirt's) and, but for kemu's service accounts, a changed
// request annotation.
func (c Config) validateVMIUpdate(req *admissionv1.AdmissionRequest, old, vmi *v1.VirtualMachineInstance) field.ErrorList {
	var errs field.ErrorList
	if !apiequality.Semantic.DeepEqual(old.Spec, vmi.Spec) && !onlyLinkStatesDiffer(&old.Spec, &vmi.Spec) {
		errs = append(errs, field.Forbidden(field.NewPath("spec"),
			"a VirtualMachineInstance's spec is immutable; change its VirtualMachine, or delete and recreate it"))
	}
	if !c.privileged(req.UserInfo.Username) {
		p := field.NewPath("metadata", "annotations")
		for _, a := range ProtectedAnnotations {
			ov, oldHas := old.Annotations[a]
			nv, newHas := vmi.Annotations[a]
			if oldHas != newHas || ov != nv {
				errs = append(errs, field.Forbidden(p.Key(a), fmt.Sprintf(
					"only kemu's service accounts may change it (user %q); use the VMI's subresources (kemuctl pause, unpause, soft-reboot)",
					req.UserInfo.Username)))
			}
		}
	}
	return errs
}

// invalid allows an object without errors and refuses one with errors as
// kube-apiserver refuses an invalid object: 422 Invalid, one cause per
// error, every error in the message.
func invalid(kind metav1.GroupVersionKind, name string, errs field.ErrorList) *admissionv1.AdmissionResponse {
	if len(errs) == 0 {
		return allow()
	}
	return deny(apierrors.NewInvalid(schema.GroupKind{Group: kind.Group, Kind: kind.Kind}, name, errs))
}
