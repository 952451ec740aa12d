package vmistatus

// Reasons the VMI controller writes on a VMI (status.reason, the
// Synchronized condition, events) and the VM controller reads for the VM's
// printableStatus. KubeVirt's values.
const (
	// ReasonPVCNotFound: a claim the VMI uses does not exist (the VM shows
	// ErrorPvcNotFound).
	ReasonPVCNotFound = "FailedPvcNotFound"
	// ReasonFailedDataVolumeImport: a DataVolume the VMI (or the VM's
	// template) uses is Failed.
	ReasonFailedDataVolumeImport = "FailedDataVolumeImport"
)
