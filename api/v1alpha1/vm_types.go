package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// VirtualMachine keeps a VirtualMachineInstance running (or not) according to
// its run strategy, creating a new VMI from its template when needed.
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=vm;vms,categories=kemu;all
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.printableStatus`
// +kubebuilder:printcolumn:name="Ready",type=boolean,JSONPath=`.status.ready`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Live-Migratable",type=string,JSONPath=`.status.conditions[?(@.type=='LiveMigratable')].status`,priority=1
// +kubebuilder:printcolumn:name="Paused",type=string,JSONPath=`.status.conditions[?(@.type=='Paused')].status`,priority=1
// +kubebuilder:printcolumn:name="Agent-Connected",type=string,JSONPath=`.status.conditions[?(@.type=='AgentConnected')].status`,priority=1
type VirtualMachine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec VirtualMachineSpec `json:"spec"`
	// +optional
	Status VirtualMachineStatus `json:"status,omitempty"`
}

// VirtualMachineList is a list of VirtualMachines.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type VirtualMachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachine `json:"items"`
}

// VirtualMachineRunStrategy says when the VM should have a running VMI.
// +kubebuilder:validation:Enum=Always;Halted;Manual;RerunOnFailure;Once
type VirtualMachineRunStrategy string

// Run strategies.
const (
	// RunStrategyAlways keeps a VMI running, recreating it whenever it ends.
	RunStrategyAlways VirtualMachineRunStrategy = "Always"
	// RunStrategyHalted keeps no VMI.
	RunStrategyHalted VirtualMachineRunStrategy = "Halted"
	// RunStrategyManual starts and stops only on request.
	RunStrategyManual VirtualMachineRunStrategy = "Manual"
	// RunStrategyRerunOnFailure recreates the VMI only if it failed.
	RunStrategyRerunOnFailure VirtualMachineRunStrategy = "RerunOnFailure"
	// RunStrategyOnce runs the VMI once, whatever its outcome.
	RunStrategyOnce VirtualMachineRunStrategy = "Once"
)

// VirtualMachineSpec is the desired state of a VirtualMachine.
// +kubebuilder:validation:XValidation:rule="!(has(self.running) && has(self.runStrategy))",message="running and runStrategy are mutually exclusive"
type VirtualMachineSpec struct {
	// Running is KubeVirt's deprecated boolean form of runStrategy:
	// true means Always, false means Halted. Defaulting turns it into
	// runStrategy.
	// +optional
	Running *bool `json:"running,omitempty"`
	// RunStrategy says when a VMI should run. Default Halted.
	// +optional
	RunStrategy *VirtualMachineRunStrategy `json:"runStrategy,omitempty"`
	// Template is the VMI to create.
	Template *VirtualMachineInstanceTemplateSpec `json:"template"`

	// Instancetype references the instance type the VMI is expanded with
	// (docs/vm.md).
	// +optional
	Instancetype *InstancetypeMatcher `json:"instancetype,omitempty"`
	// Preference references the preference the VMI is expanded with.
	// +optional
	Preference *PreferenceMatcher `json:"preference,omitempty"`

	// DataVolumeTemplates are CDI DataVolumes the VM controller creates
	// (owned by the VM) before it starts a VMI; each must be used by a
	// dataVolume (or persistentVolumeClaim) volume of the template. Needs
	// CDI's API (cdi.kubevirt.io) in the cluster (docs/vm.md#datavolumetemplates).
	// +optional
	DataVolumeTemplates []DataVolumeTemplateSpec `json:"dataVolumeTemplates,omitempty"`

	UpdateVolumesStrategy *UnsupportedScalar `json:"updateVolumesStrategy,omitempty"`
}

// DataVolumeTemplateSpec is a DataVolume the VM controller creates: its
// metadata (name, labels, annotations) and CDI's spec, passed on as given.
type DataVolumeTemplateSpec struct {
	// APIVersion and Kind are accepted and not used, as in KubeVirt (whose
	// template inlines TypeMeta only for backwards compatibility).
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
	// +optional
	Kind string `json:"kind,omitempty"`
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Spec is CDI's DataVolumeSpec (cdi.kubevirt.io/v1beta1), which kemu
	// does not interpret beyond KubeVirt's admission checks.
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	Spec runtime.RawExtension `json:"spec"`
}

// VirtualMachineInstanceTemplateSpec is a VMI's metadata and spec.
type VirtualMachineInstanceTemplateSpec struct {
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	ObjectMeta metav1.ObjectMeta `json:"metadata,omitempty"`
	// +optional
	Spec VirtualMachineInstanceSpec `json:"spec,omitempty"`
}

// VirtualMachinePrintableStatus is a human-readable summary of a VM.
type VirtualMachinePrintableStatus string

// Printable statuses (as in KubeVirt).
const (
	VirtualMachineStatusStopped           VirtualMachinePrintableStatus = "Stopped"
	VirtualMachineStatusProvisioning      VirtualMachinePrintableStatus = "Provisioning"
	VirtualMachineStatusStarting          VirtualMachinePrintableStatus = "Starting"
	VirtualMachineStatusRunning           VirtualMachinePrintableStatus = "Running"
	VirtualMachineStatusPaused            VirtualMachinePrintableStatus = "Paused"
	VirtualMachineStatusStopping          VirtualMachinePrintableStatus = "Stopping"
	VirtualMachineStatusTerminating       VirtualMachinePrintableStatus = "Terminating"
	VirtualMachineStatusCrashLoopBackOff  VirtualMachinePrintableStatus = "CrashLoopBackOff"
	VirtualMachineStatusMigrating         VirtualMachinePrintableStatus = "Migrating"
	VirtualMachineStatusUnknown           VirtualMachinePrintableStatus = "Unknown"
	VirtualMachineStatusUnschedulable     VirtualMachinePrintableStatus = "ErrorUnschedulable"
	VirtualMachineStatusErrImagePull      VirtualMachinePrintableStatus = "ErrImagePull"
	VirtualMachineStatusImagePullBackOff  VirtualMachinePrintableStatus = "ImagePullBackOff"
	VirtualMachineStatusPvcNotFound       VirtualMachinePrintableStatus = "ErrorPvcNotFound"
	VirtualMachineStatusWaitingForVolumes VirtualMachinePrintableStatus = "WaitingForVolumeBinding"
	VirtualMachineStatusDataVolumeError   VirtualMachinePrintableStatus = "DataVolumeError"
)

// VirtualMachineStatus is the observed state of a VirtualMachine.
type VirtualMachineStatus struct {
	// Created says whether a VMI exists for this VM.
	// +optional
	Created bool `json:"created,omitempty"`
	// Ready says whether the VMI is Ready.
	// +optional
	Ready bool `json:"ready,omitempty"`
	// PrintableStatus summarises the VM for humans.
	// +optional
	PrintableStatus VirtualMachinePrintableStatus `json:"printableStatus,omitempty"`
	// Conditions of the VM (mirrored from its VMI, plus Failure).
	// +optional
	Conditions []VirtualMachineCondition `json:"conditions,omitempty"`
	// StateChangeRequests are pending start/stop requests (kemuctl start/stop).
	// +optional
	StateChangeRequests []VirtualMachineStateChangeRequest `json:"stateChangeRequests,omitempty"`
	// ObservedGeneration is the spec generation last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// RunStrategy in effect.
	// +optional
	RunStrategy VirtualMachineRunStrategy `json:"runStrategy,omitempty"`
	// StartFailure counts consecutive VMIs that ended without ever running,
	// and holds the next start back until retryAfterTimestamp.
	// +optional
	StartFailure *VirtualMachineStartFailure `json:"startFailure,omitempty"`
	// InstancetypeRef is the instance type the VM's VMIs are expanded with
	// and the ControllerRevision keeping it.
	// +optional
	InstancetypeRef *InstancetypeStatusRef `json:"instancetypeRef,omitempty"`
	// PreferenceRef is the preference the VM's VMIs are expanded with and
	// the ControllerRevision keeping it.
	// +optional
	PreferenceRef *InstancetypeStatusRef `json:"preferenceRef,omitempty"`
}

// VirtualMachineStartFailure is a VM's record of failed starts (KubeVirt's
// status.startFailure).
type VirtualMachineStartFailure struct {
	// +optional
	ConsecutiveFailCount int `json:"consecutiveFailCount,omitempty"`
	// +optional
	LastFailedVMIUID types.UID `json:"lastFailedVMIUID,omitempty"`
	// +optional
	RetryAfterTimestamp *metav1.Time `json:"retryAfterTimestamp,omitempty"`
}

// VirtualMachineConditionType names a VM condition.
type VirtualMachineConditionType string

// VM conditions.
const (
	VirtualMachineReady   VirtualMachineConditionType = "Ready"
	VirtualMachinePaused  VirtualMachineConditionType = "Paused"
	VirtualMachineFailure VirtualMachineConditionType = "Failure"
)

// VirtualMachineCondition is one condition of a VM.
type VirtualMachineCondition struct {
	Type   VirtualMachineConditionType `json:"type"`
	Status corev1.ConditionStatus      `json:"status"`
	// +optional
	LastProbeTime metav1.Time `json:"lastProbeTime,omitempty"`
	// +optional
	LastTransitionTime metav1.Time `json:"lastTransitionTime,omitempty"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
}

// StateChangeRequestAction is start or stop.
type StateChangeRequestAction string

// State change actions.
const (
	StartRequest StateChangeRequestAction = "Start"
	StopRequest  StateChangeRequestAction = "Stop"
)

// VirtualMachineStateChangeRequest asks the VM controller to start or stop.
type VirtualMachineStateChangeRequest struct {
	Action StateChangeRequestAction `json:"action"`
	// +optional
	Data map[string]string `json:"data,omitempty"`
	// UID of the VMI a Stop applies to.
	// +optional
	UID *string `json:"uid,omitempty"`
}
