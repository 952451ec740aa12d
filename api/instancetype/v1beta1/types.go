package v1beta1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// VirtualMachineInstancetype is a namespaced set of quantitative VM
// settings (vCPUs, memory, …) that VirtualMachines reference by name.
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=vminstancetype;vminstancetypes;vmf;vmfs,categories=kemu
// +kubebuilder:printcolumn:name="CPU",type=integer,JSONPath=`.spec.cpu.guest`
// +kubebuilder:printcolumn:name="Memory",type=string,JSONPath=`.spec.memory.guest`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VirtualMachineInstancetype struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec VirtualMachineInstancetypeSpec `json:"spec"`
}

// VirtualMachineInstancetypeList is a list of VirtualMachineInstancetypes.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type VirtualMachineInstancetypeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachineInstancetype `json:"items"`
}

// VirtualMachineClusterInstancetype is the cluster-wide VirtualMachineInstancetype.
//
// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=vmclusterinstancetype;vmclusterinstancetypes;vmcf;vmcfs,categories=kemu
// +kubebuilder:printcolumn:name="CPU",type=integer,JSONPath=`.spec.cpu.guest`
// +kubebuilder:printcolumn:name="Memory",type=string,JSONPath=`.spec.memory.guest`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VirtualMachineClusterInstancetype struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec VirtualMachineInstancetypeSpec `json:"spec"`
}

// VirtualMachineClusterInstancetypeList is a list of VirtualMachineClusterInstancetypes.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type VirtualMachineClusterInstancetypeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachineClusterInstancetype `json:"items"`
}

// VirtualMachineInstancetypeSpec is what an instance type gives a VM. cpu
// and memory are required; a VM referencing it may not set what it sets
// (docs/vm.md "Instance types and preferences").
type VirtualMachineInstancetypeSpec struct {
	// NodeSelector is the VMI's nodeSelector.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// CPU: the number of vCPUs and the model.
	CPU CPUInstancetype `json:"cpu"`
	// Memory: the guest's memory.
	Memory MemoryInstancetype `json:"memory"`
	// Annotations are added to the VMI.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`

	SchedulerName   *v1.UnsupportedScalar `json:"schedulerName,omitempty"`
	GPUs            v1.UnsupportedList    `json:"gpus,omitempty"`
	HostDevices     v1.UnsupportedList    `json:"hostDevices,omitempty"`
	IOThreadsPolicy *v1.UnsupportedScalar `json:"ioThreadsPolicy,omitempty"`
	IOThreads       *v1.Unsupported       `json:"ioThreads,omitempty"`
	LaunchSecurity  *v1.Unsupported       `json:"launchSecurity,omitempty"`
}

// CPUInstancetype is an instance type's CPU.
type CPUInstancetype struct {
	// Guest is the number of vCPUs; the preference's preferredCPUTopology
	// (default sockets) lays them out as sockets, cores and threads.
	// +kubebuilder:validation:Minimum=1
	Guest uint32 `json:"guest"`
	// Model is the VMI's domain.cpu.model.
	// +optional
	Model *string `json:"model,omitempty"`

	// DedicatedCPUPlacement, NUMA, IsolateEmulatorThread and Realtime are
	// the VMI's domain.cpu fields of the same names.
	// +optional
	DedicatedCPUPlacement *bool `json:"dedicatedCPUPlacement,omitempty"`
	// +optional
	NUMA *v1.NUMA `json:"numa,omitempty"`
	// +optional
	IsolateEmulatorThread *bool `json:"isolateEmulatorThread,omitempty"`
	// +optional
	Realtime *v1.Realtime `json:"realtime,omitempty"`

	MaxSockets *v1.UnsupportedScalar `json:"maxSockets,omitempty"`
}

// MemoryInstancetype is an instance type's memory.
type MemoryInstancetype struct {
	// Guest is the memory the guest sees (at least 32Mi).
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('32Mi')) >= 0",message="must be at least 32Mi"
	Guest resource.Quantity `json:"guest"`
	// OvercommitPercent lowers the launcher Pod's memory request below the
	// guest memory by this percentage.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	OvercommitPercent int `json:"overcommitPercent,omitempty"`

	// Hugepages is the VMI's domain.memory.hugepages.
	// +optional
	Hugepages *v1.Hugepages `json:"hugepages,omitempty"`

	MaxGuest *v1.UnsupportedScalar `json:"maxGuest,omitempty"`
}

// VirtualMachinePreference is a namespaced set of preferred VM settings
// that fill in only what a VirtualMachine leaves unset.
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=vmpref;vmprefs;vmp;vmps,categories=kemu
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VirtualMachinePreference struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec VirtualMachinePreferenceSpec `json:"spec"`
}

// VirtualMachinePreferenceList is a list of VirtualMachinePreferences.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type VirtualMachinePreferenceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachinePreference `json:"items"`
}

// VirtualMachineClusterPreference is the cluster-wide VirtualMachinePreference.
//
// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=vmcp;vmcps,categories=kemu
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VirtualMachineClusterPreference struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec VirtualMachinePreferenceSpec `json:"spec"`
}

// VirtualMachineClusterPreferenceList is a list of VirtualMachineClusterPreferences.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type VirtualMachineClusterPreferenceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachineClusterPreference `json:"items"`
}

// VirtualMachinePreferenceSpec is what a preference fills in.
type VirtualMachinePreferenceSpec struct {
	// CPU: the topology the instance type's vCPUs are laid out in.
	// +optional
	CPU *CPUPreferences `json:"cpu,omitempty"`
	// Devices: buses, models and automatically attached devices.
	// +optional
	Devices *DevicePreferences `json:"devices,omitempty"`
	// Features: ACPI.
	// +optional
	Features *FeaturePreferences `json:"features,omitempty"`
	// Firmware: BIOS or EFI, Secure Boot.
	// +optional
	Firmware *FirmwarePreferences `json:"firmware,omitempty"`
	// Machine: the machine type.
	// +optional
	Machine *MachinePreferences `json:"machine,omitempty"`
	// PreferredTerminationGracePeriodSeconds is the VMI's
	// terminationGracePeriodSeconds when the VM sets none.
	// +optional
	// +kubebuilder:validation:Minimum=0
	PreferredTerminationGracePeriodSeconds *int64 `json:"preferredTerminationGracePeriodSeconds,omitempty"`
	// Requirements are the least vCPUs and memory the VM (or its instance
	// type) must give for the preference to apply.
	// +optional
	Requirements *PreferenceRequirements `json:"requirements,omitempty"`
	// Annotations are added to the VMI unless it has them.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
	// PreferSpreadSocketToCoreRatio is the ratio of the spread topology
	// (default 2); spreadOptions.ratio overrides it.
	// +optional
	PreferSpreadSocketToCoreRatio uint32 `json:"preferSpreadSocketToCoreRatio,omitempty"`

	Clock                   *v1.Unsupported       `json:"clock,omitempty"`
	Volumes                 *v1.Unsupported       `json:"volumes,omitempty"`
	PreferredSubdomain      *v1.UnsupportedScalar `json:"preferredSubdomain,omitempty"`
	PreferredArchitecture   *v1.UnsupportedScalar `json:"preferredArchitecture,omitempty"`
	PreferredLaunchSecurity *v1.Unsupported       `json:"preferredLaunchSecurity,omitempty"`
}

// PreferredCPUTopology lays out vCPUs as sockets, cores or threads; the
// prefer* spellings are KubeVirt's deprecated ones.
// +kubebuilder:validation:Enum=sockets;cores;threads;spread;any;preferSockets;preferCores;preferThreads;preferSpread;preferAny
type PreferredCPUTopology string

// CPU topologies.
const (
	Sockets PreferredCPUTopology = "sockets"
	Cores   PreferredCPUTopology = "cores"
	Threads PreferredCPUTopology = "threads"
	Spread  PreferredCPUTopology = "spread"
	Any     PreferredCPUTopology = "any"

	DeprecatedPreferSockets PreferredCPUTopology = "preferSockets"
	DeprecatedPreferCores   PreferredCPUTopology = "preferCores"
	DeprecatedPreferThreads PreferredCPUTopology = "preferThreads"
	DeprecatedPreferSpread  PreferredCPUTopology = "preferSpread"
	DeprecatedPreferAny     PreferredCPUTopology = "preferAny"
)

// CPUPreferences are a preference's CPU settings.
type CPUPreferences struct {
	// PreferredCPUTopology: sockets (default), cores, threads, spread or any.
	// +optional
	PreferredCPUTopology *PreferredCPUTopology `json:"preferredCPUTopology,omitempty"`
	// SpreadOptions tune the spread topology.
	// +optional
	SpreadOptions *SpreadOptions `json:"spreadOptions,omitempty"`

	PreferredCPUFeatures v1.UnsupportedList `json:"preferredCPUFeatures,omitempty"`
}

// SpreadAcross says what the spread topology spreads vCPUs across.
// +kubebuilder:validation:Enum=SocketsCores;CoresThreads;SocketsCoresThreads
type SpreadAcross string

// Spread targets.
const (
	SpreadAcrossSocketsCores        SpreadAcross = "SocketsCores"
	SpreadAcrossCoresThreads        SpreadAcross = "CoresThreads"
	SpreadAcrossSocketsCoresThreads SpreadAcross = "SocketsCoresThreads"
)

// SpreadOptions tune the spread topology.
type SpreadOptions struct {
	// Across: SocketsCores (default), CoresThreads or SocketsCoresThreads.
	// +optional
	Across *SpreadAcross `json:"across,omitempty"`
	// Ratio of cores per socket (SocketsCores, SocketsCoresThreads) or
	// threads per core (CoresThreads, only 2). Default 2.
	// +optional
	// +kubebuilder:validation:Minimum=1
	Ratio *uint32 `json:"ratio,omitempty"`
}

// DevicePreferences are a preference's device settings.
type DevicePreferences struct {
	// +optional
	PreferredAutoattachGraphicsDevice *bool `json:"preferredAutoattachGraphicsDevice,omitempty"`
	// +optional
	PreferredAutoattachMemBalloon *bool `json:"preferredAutoattachMemBalloon,omitempty"`
	// +optional
	PreferredAutoattachPodInterface *bool `json:"preferredAutoattachPodInterface,omitempty"`
	// +optional
	PreferredAutoattachSerialConsole *bool `json:"preferredAutoattachSerialConsole,omitempty"`
	// PreferredDiskBus is the bus of disks without one.
	// +optional
	PreferredDiskBus v1.DiskBus `json:"preferredDiskBus,omitempty"`
	// PreferredCdromBus is the bus of CD-ROMs without one.
	// +optional
	PreferredCdromBus v1.DiskBus `json:"preferredCdromBus,omitempty"`
	// PreferredInterfaceModel is the model of interfaces without one.
	// +optional
	// +kubebuilder:validation:Enum=virtio;e1000;e1000e;rtl8139
	PreferredInterfaceModel string `json:"preferredInterfaceModel,omitempty"`
	// PreferredRng adds a virtio-rng device when the VM has none.
	// +optional
	PreferredRng *v1.Rng `json:"preferredRng,omitempty"`
	// +optional
	PreferredNetworkInterfaceMultiQueue *bool `json:"preferredNetworkInterfaceMultiQueue,omitempty"`
	// PreferredInterfaceMasquerade binds pod-network interfaces without a
	// binding with masquerade.
	// +optional
	PreferredInterfaceMasquerade *v1.InterfaceMasquerade `json:"preferredInterfaceMasquerade,omitempty"`

	PreferredAutoattachInputDevice *v1.UnsupportedBool   `json:"preferredAutoattachInputDevice,omitempty"`
	PreferredDisableHotplug        *v1.UnsupportedBool   `json:"preferredDisableHotplug,omitempty"`
	PreferredVirtualGPUOptions     *v1.Unsupported       `json:"preferredVirtualGPUOptions,omitempty"`
	PreferredSoundModel            *v1.UnsupportedScalar `json:"preferredSoundModel,omitempty"`
	PreferredUseVirtioTransitional *v1.UnsupportedBool   `json:"preferredUseVirtioTransitional,omitempty"`
	PreferredInputBus              *v1.UnsupportedScalar `json:"preferredInputBus,omitempty"`
	PreferredInputType             *v1.UnsupportedScalar `json:"preferredInputType,omitempty"`
	PreferredLunBus                *v1.UnsupportedScalar `json:"preferredLunBus,omitempty"`
	PreferredDiskDedicatedIoThread *v1.UnsupportedBool   `json:"preferredDiskDedicatedIoThread,omitempty"`
	PreferredDiskCache             *v1.UnsupportedScalar `json:"preferredDiskCache,omitempty"`
	PreferredDiskIO                *v1.UnsupportedScalar `json:"preferredDiskIO,omitempty"`
	PreferredDiskBlockSize         *v1.Unsupported       `json:"preferredDiskBlockSize,omitempty"`
	PreferredBlockMultiQueue       *v1.UnsupportedBool   `json:"preferredBlockMultiQueue,omitempty"`
	PreferredTPM                   *v1.Unsupported       `json:"preferredTPM,omitempty"`
	PreferredPanicDeviceModel      *v1.UnsupportedScalar `json:"preferredPanicDeviceModel,omitempty"`
	PreferredVideoType             *v1.UnsupportedScalar `json:"preferredVideoType,omitempty"`
}

// FeaturePreferences are a preference's hypervisor features.
type FeaturePreferences struct {
	// PreferredAcpi is the VMI's features.acpi when the VM leaves
	// acpi.enabled unset (KubeVirt overwrites the VM's own, for want of a
	// way to tell unset; kemu can).
	// +optional
	PreferredAcpi *v1.FeatureState `json:"preferredAcpi,omitempty"`

	PreferredApic       *v1.Unsupported `json:"preferredApic,omitempty"`
	PreferredHyperv     *v1.Unsupported `json:"preferredHyperv,omitempty"`
	PreferredKvm        *v1.Unsupported `json:"preferredKvm,omitempty"`
	PreferredPvspinlock *v1.Unsupported `json:"preferredPvspinlock,omitempty"`
	PreferredSmm        *v1.Unsupported `json:"preferredSmm,omitempty"`
}

// FirmwarePreferences are a preference's firmware settings.
type FirmwarePreferences struct {
	// PreferredUseBios boots with SeaBIOS when the VM chose no bootloader.
	// +optional
	PreferredUseBios *bool `json:"preferredUseBios,omitempty"`
	// PreferredUseEfi boots with OVMF when the VM chose no bootloader
	// (KubeVirt deprecates it for preferredEfi).
	// +optional
	PreferredUseEfi *bool `json:"preferredUseEfi,omitempty"`
	// PreferredUseSecureBoot is efi.secureBoot when EFI is used and the VM
	// does not say (deprecated for preferredEfi).
	// +optional
	PreferredUseSecureBoot *bool `json:"preferredUseSecureBoot,omitempty"`
	// PreferredEfi is the EFI bootloader when the VM chose none.
	// +optional
	PreferredEfi *v1.EFI `json:"preferredEfi,omitempty"`

	PreferredUseBiosSerial *v1.UnsupportedBool `json:"preferredUseBiosSerial,omitempty"`
}

// MachinePreferences are a preference's machine settings.
type MachinePreferences struct {
	// PreferredMachineType is the machine type when the VM sets none.
	// +optional
	PreferredMachineType string `json:"preferredMachineType,omitempty"`
}

// PreferenceRequirements are the least resources a preference needs.
type PreferenceRequirements struct {
	// +optional
	CPU *CPUPreferenceRequirement `json:"cpu,omitempty"`
	// +optional
	Memory *MemoryPreferenceRequirement `json:"memory,omitempty"`

	Architecture *v1.UnsupportedScalar `json:"architecture,omitempty"`
}

// CPUPreferenceRequirement is the least number of vCPUs.
type CPUPreferenceRequirement struct {
	Guest uint32 `json:"guest"`
}

// MemoryPreferenceRequirement is the least guest memory.
type MemoryPreferenceRequirement struct {
	Guest resource.Quantity `json:"guest"`
}
