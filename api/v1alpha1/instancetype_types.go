package v1alpha1

// InferFromVolumeFailurePolicy says what happens when no instance type or
// preference can be inferred from the named volume.
// +kubebuilder:validation:Enum=Reject;Ignore
type InferFromVolumeFailurePolicy string

// Inference failure policies (KubeVirt's).
const (
	// RejectInferFromVolumeFailure fails the VM (the default).
	RejectInferFromVolumeFailure InferFromVolumeFailurePolicy = "Reject"
	// IgnoreInferFromVolumeFailure goes on without the instance type (or
	// preference) when the volume is not a persistentVolumeClaim or its
	// claim lacks the label; the template's memory serves only that case.
	IgnoreInferFromVolumeFailure InferFromVolumeFailurePolicy = "Ignore"
)

// InstancetypeMatcher references the instance type a VM's VMI is expanded
// with (KubeVirt's spec.instancetype).
type InstancetypeMatcher struct {
	// Name of the VirtualMachineInstancetype or VirtualMachineClusterInstancetype.
	// +optional
	Name string `json:"name,omitempty"`
	// Kind: VirtualMachineClusterInstancetype (default) or
	// VirtualMachineInstancetype (in the VM's namespace); the resource names
	// in any case are accepted too.
	// +optional
	Kind string `json:"kind,omitempty"`
	// RevisionName pins a ControllerRevision (in the VM's namespace) holding
	// the instance type to use instead of the live object.
	// +optional
	RevisionName string `json:"revisionName,omitempty"`
	// InferFromVolume names a persistentVolumeClaim volume of the template
	// whose claim's labels name the instance type.
	// +optional
	InferFromVolume string `json:"inferFromVolume,omitempty"`
	// InferFromVolumeFailurePolicy: Reject (default) or Ignore.
	// +optional
	InferFromVolumeFailurePolicy *InferFromVolumeFailurePolicy `json:"inferFromVolumeFailurePolicy,omitempty"`
}

// PreferenceMatcher references the preference a VM's VMI is expanded with
// (KubeVirt's spec.preference).
type PreferenceMatcher struct {
	// Name of the VirtualMachinePreference or VirtualMachineClusterPreference.
	// +optional
	Name string `json:"name,omitempty"`
	// Kind: VirtualMachineClusterPreference (default) or
	// VirtualMachinePreference (in the VM's namespace); the resource names
	// in any case are accepted too.
	// +optional
	Kind string `json:"kind,omitempty"`
	// RevisionName pins a ControllerRevision (in the VM's namespace) holding
	// the preference to use instead of the live object.
	// +optional
	RevisionName string `json:"revisionName,omitempty"`
	// InferFromVolume names a persistentVolumeClaim volume of the template
	// whose claim's labels name the preference.
	// +optional
	InferFromVolume string `json:"inferFromVolume,omitempty"`
	// InferFromVolumeFailurePolicy: Reject (default) or Ignore.
	// +optional
	InferFromVolumeFailurePolicy *InferFromVolumeFailurePolicy `json:"inferFromVolumeFailurePolicy,omitempty"`
}

// InstancetypeStatusRef is what the VM controller resolved a matcher to:
// the object's kind and name (inferred ones included) and the
// ControllerRevision holding its spec as the VM uses it (KubeVirt's
// status.instancetypeRef and status.preferenceRef).
type InstancetypeStatusRef struct {
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	Kind string `json:"kind,omitempty"`
	// ControllerRevisionRef names the ControllerRevision the VM's VMIs are
	// expanded from.
	// +optional
	ControllerRevisionRef *ControllerRevisionRef `json:"controllerRevisionRef,omitempty"`
	// InferFromVolume and InferFromVolumeFailurePolicy as the matcher said
	// when the reference was resolved.
	// +optional
	InferFromVolume string `json:"inferFromVolume,omitempty"`
	// +optional
	InferFromVolumeFailurePolicy *InferFromVolumeFailurePolicy `json:"inferFromVolumeFailurePolicy,omitempty"`
}

// ControllerRevisionRef names a ControllerRevision in the VM's namespace.
type ControllerRevisionRef struct {
	// +optional
	Name string `json:"name,omitempty"`
}
