package validation

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// PersistentTPMDetail is why domain.devices.tpm.persistent: true is
// refused: KubeVirt keeps such a TPM's state on a per-VM backend storage
// PVC, which kemu does not create yet.
const PersistentTPMDetail = "kemu does not keep a TPM's state across VM restarts yet (KubeVirt's backend storage PVC): a TPM's state lives as long as the VMI"

// validateTPM checks domain.devices.tpm: persistent: true is refused by
// name (on a disabled TPM too: the field asks for something kemu cannot
// do).
func validateTPM(spec *v1.VirtualMachineInstanceSpec, fldPath *field.Path) field.ErrorList {
	t := spec.Domain.Devices.TPM
	if t == nil || t.Persistent == nil || !*t.Persistent {
		return nil
	}
	return field.ErrorList{field.Forbidden(fldPath.Child("domain", "devices", "tpm", "persistent"), PersistentTPMDetail)}
}
