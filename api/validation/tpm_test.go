package validation

import (
	"slices"
	"testing"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

func TestTPM(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		name       string
		tpm        *v1.TPMDevice
		has, persi bool
		want       []string
	}{
		{name: "none"},
		{name: "empty", tpm: &v1.TPMDevice{}, has: true},
		{name: "enabled", tpm: &v1.TPMDevice{Enabled: &yes, Persistent: &no}, has: true},
		{name: "disabled", tpm: &v1.TPMDevice{Enabled: &no}},
		// KubeVirt's backend storage (the controller's PVC, the
		// launcher's state directory on it).
		{name: "persistent", tpm: &v1.TPMDevice{Persistent: &yes}, has: true, persi: true},
		// No TPM, so no state to keep (KubeVirt's HasPersistentDevice).
		{name: "disabled persistent", tpm: &v1.TPMDevice{Enabled: &no, Persistent: &yes}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vmi := baseVMI()
			vmi.Spec.Domain.Devices.TPM = tc.tpm
			v1.SetVirtualMachineInstanceDefaults(vmi)
			if got := v1.HasTPM(&vmi.Spec); got != tc.has {
				t.Errorf("HasTPM = %v, want %v", got, tc.has)
			}
			if got := v1.HasPersistentTPM(&vmi.Spec); got != tc.persi {
				t.Errorf("HasPersistentTPM = %v, want %v", got, tc.persi)
			}
			got := errorKeys(ValidateVirtualMachineInstance(vmi))
			if !slices.Equal(got, tc.want) {
				t.Errorf("errors\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}
