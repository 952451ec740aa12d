package v1alpha1

// HasTPM says whether spec gives the guest a TPM: domain.devices.tpm set
// and not enabled: false (KubeVirt's tpm.HasDevice).
func HasTPM(spec *VirtualMachineInstanceSpec) bool {
	t := spec.Domain.Devices.TPM
	return t != nil && (t.Enabled == nil || *t.Enabled)
}

// HasPersistentTPM says whether spec asks for a TPM whose state outlives
// the VMI (persistent: true; KubeVirt's tpm.HasPersistentDevice).
func HasPersistentTPM(spec *VirtualMachineInstanceSpec) bool {
	return HasTPM(spec) && spec.Domain.Devices.TPM.Persistent != nil && *spec.Domain.Devices.TPM.Persistent
}
