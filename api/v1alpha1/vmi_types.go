package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// VirtualMachineInstance is a running (or about to run) virtual machine: one
// launcher Pod, one QEMU.
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=vmi;vmis,categories=kemu;all
// +kubebuilder:selectablefield:JSONPath=`.status.nodeName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.nodeName`
// +kubebuilder:printcolumn:name="IP",type=string,JSONPath=`.status.interfaces[0].ipAddress`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=='Ready')].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Live-Migratable",type=string,JSONPath=`.status.conditions[?(@.type=='LiveMigratable')].status`,priority=1
// +kubebuilder:printcolumn:name="Paused",type=string,JSONPath=`.status.conditions[?(@.type=='Paused')].status`,priority=1
// +kubebuilder:printcolumn:name="Agent-Connected",type=string,JSONPath=`.status.conditions[?(@.type=='AgentConnected')].status`,priority=1
// +kubebuilder:printcolumn:name="Guest-OS",type=string,JSONPath=`.status.guestOSInfo.prettyName`,priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`,priority=1
type VirtualMachineInstance struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec VirtualMachineInstanceSpec `json:"spec"`
	// +optional
	Status VirtualMachineInstanceStatus `json:"status,omitempty"`
}

// VirtualMachineInstanceList is a list of VirtualMachineInstances.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type VirtualMachineInstanceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachineInstance `json:"items"`
}

// VirtualMachineInstanceSpec is the desired VM: its domain (the virtual
// hardware), volumes, networks and scheduling.
//
// +kubebuilder:validation:XValidation:rule="!has(self.domain.devices) || !has(self.domain.devices.disks) || self.domain.devices.disks.all(d, has(self.volumes) && self.volumes.exists(v, v.name == d.name))",message="every disk attaches a volume of its name (spec.volumes)",fieldPath=".domain.devices.disks"
// +kubebuilder:validation:XValidation:rule="!has(self.domain.devices) || !has(self.domain.devices.interfaces) || self.domain.devices.interfaces.all(i, has(self.networks) && self.networks.exists(n, n.name == i.name))",message="every interface attaches a network of its name (spec.networks)",fieldPath=".domain.devices.interfaces"
type VirtualMachineInstanceSpec struct {
	// Domain is the virtual hardware.
	Domain DomainSpec `json:"domain"`

	// NodeSelector constrains the launcher Pod to nodes with these labels.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// Affinity is copied to the launcher Pod.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`
	// Tolerations are copied to the launcher Pod.
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// TerminationGracePeriodSeconds is how long the guest gets to power off
	// after an ACPI power-button press before QEMU is stopped. Default 30.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TerminationGracePeriodSeconds *int64 `json:"terminationGracePeriodSeconds,omitempty"`
	// EvictionStrategy says what happens when the node is drained.
	// +optional
	EvictionStrategy *EvictionStrategy `json:"evictionStrategy,omitempty"`
	// StartStrategy Paused starts the VM with its CPUs stopped.
	// +optional
	StartStrategy *StartStrategy `json:"startStrategy,omitempty"`
	// Volumes are the storage sources the domain's disks refer to by name.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=256
	Volumes []Volume `json:"volumes,omitempty"`
	// Networks are the networks the domain's interfaces refer to by name.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=256
	Networks []Network `json:"networks,omitempty"`

	// Hostname is the launcher Pod's and the guest's host name (the guest
	// gets it in its DHCP lease); default: the VMI's name up to its first
	// dot (DeriveHostname). A DNS-1123 label.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Hostname string `json:"hostname,omitempty"`
	// Subdomain makes the launcher Pod's FQDN
	// <hostname>.<subdomain>.<namespace>.svc.<cluster domain> (with a
	// headless Service of that name); the guest gets
	// <subdomain>.<namespace>.svc.<cluster domain> first in its DHCP domain
	// search. A DNS-1123 subdomain.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Subdomain string `json:"subdomain,omitempty"`
	// PriorityClassName is the launcher Pod's priority class.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	PriorityClassName string `json:"priorityClassName,omitempty"`
	// SchedulerName is the launcher Pod's scheduler; default: the
	// cluster's default scheduler.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	SchedulerName string `json:"schedulerName,omitempty"`
	// ReadinessProbe drives the VMI's Ready condition (and so the launcher
	// Pod's Service endpoints). See Probe.
	// +optional
	ReadinessProbe *Probe `json:"readinessProbe,omitempty"`
	// LivenessProbe failing ends the launcher (the VMI fails; a VM restarts
	// it per its runStrategy). See Probe.
	// +optional
	LivenessProbe *Probe `json:"livenessProbe,omitempty"`

	// Unsupported KubeVirt fields: declared so they are rejected, not pruned.

	TopologySpreadConstraints UnsupportedList    `json:"topologySpreadConstraints,omitempty"`
	DNSPolicy                 *UnsupportedScalar `json:"dnsPolicy,omitempty"`
	DNSConfig                 *Unsupported       `json:"dnsConfig,omitempty"`
	AccessCredentials         UnsupportedList    `json:"accessCredentials,omitempty"`
	Architecture              *UnsupportedScalar `json:"architecture,omitempty"`
	ResourceClaims            UnsupportedList    `json:"resourceClaims,omitempty"`
}

// EvictionStrategy is what happens to the VMI when its node is drained.
// +kubebuilder:validation:Enum=None;LiveMigrate;LiveMigrateIfPossible;External
type EvictionStrategy string

// Eviction strategies.
const (
	EvictionStrategyNone                  EvictionStrategy = "None"
	EvictionStrategyLiveMigrate           EvictionStrategy = "LiveMigrate"
	EvictionStrategyLiveMigrateIfPossible EvictionStrategy = "LiveMigrateIfPossible"
	EvictionStrategyExternal              EvictionStrategy = "External"
)

// StartStrategy is how the VM starts.
// +kubebuilder:validation:Enum=Paused
type StartStrategy string

// StartStrategyPaused starts QEMU with its CPUs stopped until unpaused.
const StartStrategyPaused StartStrategy = "Paused"

// DomainSpec is the virtual hardware.
type DomainSpec struct {
	// Resources are the launcher Pod's compute resources; requests.memory
	// doubles as the guest memory when memory.guest is not set.
	// +optional
	Resources ResourceRequirements `json:"resources,omitempty"`
	// CPU topology and model.
	// +optional
	CPU *CPU `json:"cpu,omitempty"`
	// Memory of the guest.
	// +optional
	Memory *Memory `json:"memory,omitempty"`
	// Machine type (q35 by default).
	// +optional
	Machine *Machine `json:"machine,omitempty"`
	// Firmware: BIOS or EFI, UUID, serial, direct kernel boot.
	// +optional
	Firmware *Firmware `json:"firmware,omitempty"`
	// Features such as ACPI.
	// +optional
	Features *Features `json:"features,omitempty"`
	// Devices: disks, interfaces, and automatically attached devices.
	Devices Devices `json:"devices"`

	// IOThreadsPolicy gives virtio disks QEMU iothreads (KubeVirt's rules,
	// PlanIOThreads): shared, one iothread for every disk without a
	// dedicated one; auto, a pool of two per requested CPU shared round
	// robin. supplementalPool is refused (QEMU 7.2 cannot spread one disk's
	// queues over several iothreads). Unset: iothreads only for disks with
	// dedicatedIOThread.
	// +optional
	// +kubebuilder:validation:Enum=shared;auto;supplementalPool
	// +kubebuilder:validation:XValidation:rule="self != 'supplementalPool'",message="supplementalPool is not supported by kemu: its QEMU (7.2) gives a disk one iothread, not a pool; use shared or auto"
	IOThreadsPolicy *IOThreadsPolicy `json:"ioThreadsPolicy,omitempty"`

	// Clock is the guest's RTC start (utc with an offset, or a time zone)
	// and its timers.
	// +optional
	Clock *Clock `json:"clock,omitempty"`

	IOThreads      *Unsupported       `json:"ioThreads,omitempty"`
	Chassis        *Unsupported       `json:"chassis,omitempty"`
	LaunchSecurity *Unsupported       `json:"launchSecurity,omitempty"`
	RebootPolicy   *UnsupportedScalar `json:"rebootPolicy,omitempty"`
}

// IOThreadsPolicy is how iothreads are given to disks.
type IOThreadsPolicy string

// IOThreads policies (KubeVirt's).
const (
	IOThreadsPolicyShared           IOThreadsPolicy = "shared"
	IOThreadsPolicyAuto             IOThreadsPolicy = "auto"
	IOThreadsPolicySupplementalPool IOThreadsPolicy = "supplementalPool"
)

// ResourceRequirements are the launcher Pod's compute resources.
type ResourceRequirements struct {
	// +optional
	Requests corev1.ResourceList `json:"requests,omitempty"`
	// +optional
	Limits corev1.ResourceList `json:"limits,omitempty"`

	OvercommitGuestOverhead *UnsupportedBool `json:"overcommitGuestOverhead,omitempty"`
}

// CPU is the guest's CPU topology and model.
type CPU struct {
	// Sockets, cores per socket and threads per core. Each defaults to 1.
	// +optional
	// +kubebuilder:validation:Minimum=1
	Sockets uint32 `json:"sockets,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=1
	Cores uint32 `json:"cores,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=1
	Threads uint32 `json:"threads,omitempty"`
	// Model is host-model (the default: -cpu host under KVM, QEMU's "max",
	// everything TCG emulates, under TCG), host-passthrough (KVM only) or a
	// QEMU CPU model name, checked at launch against the node's QEMU and
	// accelerator (query-cpu-definitions).
	// +optional
	Model string `json:"model,omitempty"`
	// Features adds or removes CPU features (QEMU's names) from the model.
	// +optional
	// +kubebuilder:validation:MaxItems=128
	Features []CPUFeature `json:"features,omitempty"`

	// DedicatedCPUPlacement gives the VM whole host CPUs of its own: the
	// launcher Pod gets Guaranteed QoS with an integer CPU count (one per
	// vCPU), the kubelet's static CPU manager gives it exclusive CPUs, and
	// the launcher pins each vCPU thread to one of them.
	// +optional
	DedicatedCPUPlacement bool `json:"dedicatedCpuPlacement,omitempty"`
	// NUMA is the guest's NUMA topology (needs dedicatedCpuPlacement and
	// memory.hugepages).
	// +optional
	NUMA *NUMA `json:"numa,omitempty"`
	// IsolateEmulatorThread asks for one more dedicated CPU, for QEMU's
	// emulator and I/O threads (needs dedicatedCpuPlacement).
	// +optional
	IsolateEmulatorThread bool `json:"isolateEmulatorThread,omitempty"`
	// Realtime runs the vCPU threads under SCHED_FIFO priority 1 (needs
	// dedicatedCpuPlacement).
	// +optional
	Realtime *Realtime `json:"realtime,omitempty"`

	MaxSockets *UnsupportedScalar `json:"maxSockets,omitempty"`
}

// NUMA is the guest's NUMA topology (KubeVirt's).
type NUMA struct {
	// GuestMappingPassthrough gives the guest one NUMA node per host NUMA
	// node of the VM's dedicated CPUs, holding the vCPUs pinned there and
	// memory bound to that host node.
	// +optional
	GuestMappingPassthrough *NUMAGuestMappingPassthrough `json:"guestMappingPassthrough,omitempty"`
}

// NUMAGuestMappingPassthrough has no settings.
type NUMAGuestMappingPassthrough struct{}

// Realtime tunes the vCPUs for low latency.
type Realtime struct {
	// Mask selects the realtime vCPUs in libvirt's syntax ("0-3,^1");
	// empty: all of them.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Mask string `json:"mask,omitempty"`
}

// Hugepages backs the guest's memory with the Pod's hugepages.
type Hugepages struct {
	// PageSize is 2Mi or 1Gi.
	// +kubebuilder:validation:Enum="2Mi";"1Gi"
	PageSize string `json:"pageSize,omitempty"`
}

// CPU models with a meaning of their own.
const (
	CPUModeHostPassthrough = "host-passthrough"
	CPUModeHostModel       = "host-model"
)

// Memory is the guest's memory.
type Memory struct {
	// Guest is the amount of memory the guest sees (at least 32Mi).
	// +optional
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('32Mi')) >= 0",message="must be at least 32Mi"
	Guest *resource.Quantity `json:"guest,omitempty"`

	// Hugepages backs the guest's memory with hugepages of this size
	// (the launcher Pod requests them: hugepages-<size>).
	// +optional
	Hugepages *Hugepages `json:"hugepages,omitempty"`

	MaxGuest         *UnsupportedScalar `json:"maxGuest,omitempty"`
	ReservedOverhead *Unsupported       `json:"reservedOverhead,omitempty"`
}

// Machine is the emulated machine.
type Machine struct {
	// Type is a QEMU machine type: q35 (default), pc-q35-*, pc, pc-i440fx-*.
	// +optional
	Type string `json:"type,omitempty"`
}

// Firmware describes how the guest boots.
type Firmware struct {
	// UUID is the SMBIOS system UUID; derived from the VMI's name if empty.
	// +optional
	UUID types.UID `json:"uuid,omitempty"`
	// Bootloader: BIOS (SeaBIOS, the default) or EFI (OVMF).
	// +optional
	Bootloader *Bootloader `json:"bootloader,omitempty"`
	// Serial is the SMBIOS system serial number.
	// +optional
	Serial string `json:"serial,omitempty"`
	// KernelBoot boots a kernel and initrd directly.
	// +optional
	KernelBoot *KernelBoot `json:"kernelBoot,omitempty"`

	ACPI *Unsupported `json:"acpi,omitempty"`
}

// Bootloader is BIOS or EFI, not both.
// +kubebuilder:validation:XValidation:rule="!(has(self.bios) && has(self.efi))",message="bios and efi are mutually exclusive"
type Bootloader struct {
	// +optional
	BIOS *BIOS `json:"bios,omitempty"`
	// +optional
	EFI *EFI `json:"efi,omitempty"`
}

// BIOS boots with SeaBIOS.
type BIOS struct {
	UseSerial *UnsupportedBool `json:"useSerial,omitempty"`
}

// EFI boots with OVMF.
type EFI struct {
	// SecureBoot enables Secure Boot (default true, as in KubeVirt).
	// +optional
	SecureBoot *bool `json:"secureBoot,omitempty"`

	Persistent *UnsupportedBool `json:"persistent,omitempty"`
}

// KernelBoot boots a kernel (and initrd) taken from a container image.
type KernelBoot struct {
	// KernelArgs is the kernel command line; needs a kernel.
	// +optional
	KernelArgs string `json:"kernelArgs,omitempty"`
	// Container holds the kernel and initrd.
	// +optional
	Container *KernelBootContainer `json:"container,omitempty"`
}

// KernelBootContainer is an image with a kernel and/or initrd in it.
type KernelBootContainer struct {
	// Image is the container image reference.
	Image string `json:"image"`
	// KernelPath is the kernel's path inside the image.
	// +optional
	KernelPath string `json:"kernelPath,omitempty"`
	// InitrdPath is the initrd's path inside the image.
	// +optional
	InitrdPath string `json:"initrdPath,omitempty"`
	// ImagePullPolicy as for containers.
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	ImagePullSecret *UnsupportedScalar `json:"imagePullSecret,omitempty"`
}

// Features are hypervisor features.
type Features struct {
	// ACPI is enabled unless set to enabled: false.
	// +optional
	ACPI FeatureState `json:"acpi,omitempty"`
	// SMM (System Management Mode): given, on unless enabled: false, which
	// turns it off (-machine smm=off) and cannot go with EFI Secure Boot
	// (KubeVirt's rule: Secure Boot needs SMM). Not given: on for Secure
	// Boot, else QEMU's default.
	// +optional
	SMM *FeatureState `json:"smm,omitempty"`

	// APIC: the local APIC (on unless enabled: false, which hides it from
	// the guest: -cpu …,-apic); endOfInterrupt is KVM's paravirtual EOI.
	// +optional
	APIC *FeatureAPIC `json:"apic,omitempty"`
	// Hyperv: Hyper-V enlightenments, rendered as QEMU's hv-* CPU flags.
	// KVM only: under TCG each enabled one is refused at launch by name.
	// +optional
	Hyperv *FeatureHyperv `json:"hyperv,omitempty"`
	// KVM: how KVM's presence is shown to the guest (hidden: kvm=off).
	// +optional
	KVM *FeatureKVM `json:"kvm,omitempty"`
	// Pvspinlock: paravirtual spinlocks (kvm-pv-unhalt); enabled needs KVM.
	// +optional
	Pvspinlock *FeatureState `json:"pvspinlock,omitempty"`

	HypervPassthrough *Unsupported `json:"hypervPassthrough,omitempty"`
}

// FeatureState turns a feature on or off; unset means on.
type FeatureState struct {
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
}

// Devices are the guest's devices.
type Devices struct {
	// Disks attach volumes to the guest.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=256
	Disks []Disk `json:"disks,omitempty"`
	// Interfaces attach networks to the guest.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=256
	Interfaces []Interface `json:"interfaces,omitempty"`
	// AutoattachPodInterface adds a pod network interface when no interface
	// is given (default true).
	// +optional
	AutoattachPodInterface *bool `json:"autoattachPodInterface,omitempty"`
	// AutoattachSerialConsole adds a serial console (default true).
	// +optional
	AutoattachSerialConsole *bool `json:"autoattachSerialConsole,omitempty"`
	// AutoattachMemBalloon adds a virtio memory balloon (default true).
	// +optional
	AutoattachMemBalloon *bool `json:"autoattachMemBalloon,omitempty"`
	// Rng adds a virtio-rng device fed by the host's /dev/urandom.
	// +optional
	Rng *Rng `json:"rng,omitempty"`
	// AutoattachGraphicsDevice adds a VGA device and a VNC server, reached
	// through the launcher (default true; false = no graphics).
	// +optional
	AutoattachGraphicsDevice *bool `json:"autoattachGraphicsDevice,omitempty"`
	// NetworkInterfaceMultiqueue gives each virtio interface on a tap one
	// queue per vCPU (at most 8; netsetup.MaxQueues).
	// +optional
	NetworkInterfaceMultiqueue *bool `json:"networkInterfaceMultiqueue,omitempty"`
	// BlockMultiQueue gives each virtio-blk disk one queue per vCPU
	// (num-queues).
	// +optional
	BlockMultiQueue *bool `json:"blockMultiQueue,omitempty"`
	// Filesystems share a volume's directory with the guest through
	// virtiofs: a vhost-user-fs device, tag = the filesystem's name, served
	// by a virtiofsd of its own. The volume is a persistentVolumeClaim
	// (file-system mode), configMap, secret, serviceAccount or downwardAPI,
	// and no disk uses it.
	// +optional
	// +listType=atomic
	Filesystems []Filesystem `json:"filesystems,omitempty"`

	// DownwardMetrics is a virtio-serial port, org.github.vhostmd.1, on
	// which the guest's vm-dump-metrics asks for the downward metrics
	// (GET /metrics/XML) and the launcher answers them, at most once a
	// second.
	// +optional
	DownwardMetrics *DownwardMetrics `json:"downwardMetrics,omitempty"`

	// TPM emulates a TPM 2.0 for the guest: swtpm, run by the launcher
	// next to QEMU, behind QEMU's tpm-tis device (tpm-crb when
	// persistent, as KubeVirt).
	// +optional
	TPM *TPMDevice `json:"tpm,omitempty"`

	UseVirtioTransitional *UnsupportedBool `json:"useVirtioTransitional,omitempty"`
	DisableHotplug        *UnsupportedBool `json:"disableHotplug,omitempty"`
	// Watchdog is an i6300esb watchdog and what happens when the guest
	// stops petting it.
	// +optional
	Watchdog *Watchdog `json:"watchdog,omitempty"`
	// Inputs are tablets on the usb or virtio bus.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	Inputs []Input `json:"inputs,omitempty"`
	// AutoattachInputDevice adds a tablet (default-0) when inputs is empty
	// (default false).
	// +optional
	AutoattachInputDevice *bool `json:"autoattachInputDevice,omitempty"`

	AutoattachVSOCK   *UnsupportedBool `json:"autoattachVSOCK,omitempty"`
	GPUs              UnsupportedList  `json:"gpus,omitempty"`
	HostDevices       UnsupportedList  `json:"hostDevices,omitempty"`
	ClientPassthrough *Unsupported     `json:"clientPassthrough,omitempty"`
	Sound             *Unsupported     `json:"sound,omitempty"`
	LogSerialConsole  *UnsupportedBool `json:"logSerialConsole,omitempty"`
	Video             *Unsupported     `json:"video,omitempty"`
	PanicDevices      UnsupportedList  `json:"panicDevices,omitempty"`
}

// TPMDevice is an emulated TPM 2.0 (KubeVirt's TPMDevice).
type TPMDevice struct {
	// Enabled: false removes the TPM (one a preference would add);
	// default true.
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// Persistent keeps the TPM's state across VM restarts: on the VM's
	// backend storage PVC (persistent-state-for-<vm>), which the
	// controller creates, behind QEMU's tpm-crb (KubeVirt's model for a
	// persistent TPM). Default false: the state lives as long as the VMI.
	// +optional
	Persistent *bool `json:"persistent,omitempty"`
}

// DownwardMetrics is the downward metrics' virtio-serial port; it has no
// settings.
type DownwardMetrics struct{}

// Rng is a virtio random number generator.
type Rng struct{}

// Disk attaches the volume of the same name to the guest.
// +kubebuilder:validation:XValidation:rule="(has(self.disk) ? 1 : 0) + (has(self.cdrom) ? 1 : 0) + (has(self.lun) ? 1 : 0) <= 1",message="a disk is one of disk, cdrom or lun"
type Disk struct {
	// Name is the name of the volume this disk attaches.
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Disk attaches the volume as a hard disk.
	// +optional
	Disk *DiskTarget `json:"disk,omitempty"`
	// CDRom attaches the volume as a CD-ROM.
	// +optional
	CDRom *CDRomTarget `json:"cdrom,omitempty"`
	// LUN passes a SCSI device (a block-mode PersistentVolumeClaim whose
	// device speaks SCSI) through to the guest: QEMU's scsi-block on the
	// virtio-scsi controller.
	// +optional
	LUN *LunTarget `json:"lun,omitempty"`
	// BootOrder is the boot priority (1 first); disks without it are not
	// bootable unless no device has one.
	// +optional
	// +kubebuilder:validation:Minimum=1
	BootOrder *uint `json:"bootOrder,omitempty"`
	// Serial is the disk's serial number as the guest sees it.
	// +optional
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.+-]+$`
	// +kubebuilder:validation:MaxLength=20
	Serial string `json:"serial,omitempty"`

	// DedicatedIOThread gives this disk a QEMU iothread of its own; virtio
	// only.
	// +optional
	DedicatedIOThread *bool `json:"dedicatedIOThread,omitempty"`
	// Cache is the host page cache mode: none (O_DIRECT), writethrough or
	// writeback. Unset: none where the file can be opened with O_DIRECT,
	// else writethrough (decided on the node).
	// +optional
	// +kubebuilder:validation:Enum=none;writethrough;writeback
	Cache DriverCache `json:"cache,omitempty"`
	// IO is QEMU's asynchronous I/O: native (Linux AIO; needs cache none)
	// or threads. Unset: native for a block device or a preallocated file
	// with cache none, else threads.
	// +optional
	// +kubebuilder:validation:Enum=native;threads
	IO DriverIO `json:"io,omitempty"`
	// Shareable lets other VMs attach the same storage: no image locking,
	// share-rw on the device; needs cache none (its default then).
	// +optional
	Shareable *bool `json:"shareable,omitempty"`

	Tag         *UnsupportedScalar `json:"tag,omitempty"`
	BlockSize   *Unsupported       `json:"blockSize,omitempty"`
	ErrorPolicy *UnsupportedScalar `json:"errorPolicy,omitempty"`
}

// DriverCache is a disk's host cache mode.
type DriverCache string

// Cache modes (KubeVirt's).
const (
	CacheNone         DriverCache = "none"
	CacheWriteThrough DriverCache = "writethrough"
	CacheWriteBack    DriverCache = "writeback"
)

// DriverIO is a disk's asynchronous I/O mode.
type DriverIO string

// I/O modes (KubeVirt's).
const (
	IONative  DriverIO = "native"
	IOThreads DriverIO = "threads"
)

// DiskBus is how a disk is attached.
// +kubebuilder:validation:Enum=virtio;sata;scsi
type DiskBus string

// Disk buses.
const (
	DiskBusVirtio DiskBus = "virtio"
	DiskBusSATA   DiskBus = "sata"
	DiskBusSCSI   DiskBus = "scsi"
)

// DiskTarget attaches a volume as a hard disk.
type DiskTarget struct {
	// Bus is virtio (default), sata or scsi.
	// +optional
	Bus DiskBus `json:"bus,omitempty"`
	// ReadOnly makes the disk read-only to the guest.
	// +optional
	ReadOnly bool `json:"readonly,omitempty"`

	PCIAddress *UnsupportedScalar `json:"pciAddress,omitempty"`
}

// LunTarget passes a SCSI device through to the guest.
type LunTarget struct {
	// Bus is scsi, the default and the only bus that passes SCSI
	// commands through (KubeVirt's virtio and sata are refused).
	// +optional
	Bus DiskBus `json:"bus,omitempty"`
	// ReadOnly makes the device read-only to the guest.
	// +optional
	ReadOnly bool `json:"readonly,omitempty"`
	// Reservation (SCSI persistent reservations through QEMU's
	// pr-manager-helper) is refused: it needs a privileged helper on the
	// node.
	// +optional
	Reservation bool `json:"reservation,omitempty"`
}

// CDRomTarget attaches a volume as a CD-ROM.
type CDRomTarget struct {
	// Bus is sata (default) or scsi.
	// +optional
	Bus DiskBus `json:"bus,omitempty"`
	// ReadOnly defaults to true. false is accepted, as KubeVirt does; the
	// guest sees a CD-ROM, whose media QEMU's CD devices never write, either
	// way.
	// +optional
	ReadOnly *bool `json:"readonly,omitempty"`

	Tray *UnsupportedScalar `json:"tray,omitempty"`
}

// Interface attaches the network of the same name to the guest.
// +kubebuilder:validation:XValidation:rule="(has(self.bridge) ? 1 : 0) + (has(self.masquerade) ? 1 : 0) + (has(self.slirp) ? 1 : 0) + (has(self.sriov) ? 1 : 0) + (has(self.macvtap) ? 1 : 0) + (has(self.passt) ? 1 : 0) + (has(self.passtBinding) ? 1 : 0) + (has(self.binding) ? 1 : 0) <= 1",message="an interface has one binding: masquerade, bridge or passtBinding"
type Interface struct {
	// Name is the name of the network this interface attaches.
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Model is the NIC model: virtio (default), e1000, e1000e or rtl8139.
	// +optional
	// +kubebuilder:validation:Enum=virtio;e1000;e1000e;rtl8139
	Model string `json:"model,omitempty"`
	// Bridge connects the guest to the pod interface: it gets the pod's IP.
	// +optional
	Bridge *InterfaceBridge `json:"bridge,omitempty"`
	// Masquerade puts the guest behind NAT on the pod interface.
	// +optional
	Masquerade *InterfaceMasquerade `json:"masquerade,omitempty"`
	// Ports forwarded to the guest (masquerade and passt); empty means all.
	// +optional
	Ports []Port `json:"ports,omitempty"`
	// MacAddress of the guest NIC.
	// +optional
	MacAddress string `json:"macAddress,omitempty"`

	Slirp   *Unsupported `json:"slirp,omitempty"`
	SRIOV   *Unsupported `json:"sriov,omitempty"`
	Macvtap *Unsupported `json:"macvtap,omitempty"`
	// PasstBinding connects the guest to the pod network through passt
	// (user-mode networking, KubeVirt ≥ 1.6's core binding): the guest gets
	// the Pod's IP, MAC-independent, with no bridge, tap or NAT in the
	// kernel. Ports, when listed, are the only ones forwarded; none means all.
	// +optional
	PasstBinding *InterfacePasstBinding `json:"passtBinding,omitempty"`
	// Binding is a network binding plugin by name, as KubeVirt's
	// (registered in the KubeVirt CR); kemu knows one, "passt", which is
	// passtBinding.
	// +optional
	Binding *PluginBinding `json:"binding,omitempty"`
	// State is the requested link state: up (default) or down, changeable
	// on a running VMI. KubeVirt's "absent" (hot-unplug) is refused.
	// +optional
	// +kubebuilder:validation:Enum=up;down;absent
	State InterfaceState `json:"state,omitempty"`

	Passt       *Unsupported       `json:"passt,omitempty"`
	BootOrder   *UnsupportedScalar `json:"bootOrder,omitempty"`
	PCIAddress  *UnsupportedScalar `json:"pciAddress,omitempty"`
	DHCPOptions *Unsupported       `json:"dhcpOptions,omitempty"`
	Tag         *UnsupportedScalar `json:"tag,omitempty"`
	ACPIIndex   *UnsupportedScalar `json:"acpiIndex,omitempty"`
}

// InterfacePasstBinding is the passt binding (KubeVirt's passtBinding).
type InterfacePasstBinding struct{}

// PluginBinding names a network binding plugin (KubeVirt's binding).
type PluginBinding struct {
	// Name of the binding; kemu supports "passt".
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
}

// InterfaceState is an interface's requested link state.
type InterfaceState string

// Interface states, KubeVirt's.
const (
	InterfaceStateAbsent   InterfaceState = "absent"
	InterfaceStateLinkUp   InterfaceState = "up"
	InterfaceStateLinkDown InterfaceState = "down"
)

// PasstBindingPluginName is the binding plugin name kemu maps to
// passtBinding (KubeVirt's passt network binding plugin).
const PasstBindingPluginName = "passt"

// UsesPasst: the interface is bound by passt (passtBinding or the passt
// binding plugin).
func (i *Interface) UsesPasst() bool {
	return i.PasstBinding != nil || (i.Binding != nil && i.Binding.Name == PasstBindingPluginName)
}

// InterfaceBridge is the bridge binding.
type InterfaceBridge struct{}

// InterfaceMasquerade is the masquerade (NAT) binding.
type InterfaceMasquerade struct{}

// Port is a port forwarded to the guest.
type Port struct {
	// Name of the port.
	// +optional
	Name string `json:"name,omitempty"`
	// Protocol is TCP (default) or UDP.
	// +optional
	// +kubebuilder:validation:Enum=TCP;UDP
	Protocol string `json:"protocol,omitempty"`
	// Port number.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
}

// Volume is a named storage source.
// +kubebuilder:validation:XValidation:rule="(has(self.containerDisk) ? 1 : 0) + (has(self.containerPath) ? 1 : 0) + (has(self.cloudInitNoCloud) ? 1 : 0) + (has(self.emptyDisk) ? 1 : 0) + (has(self.hostDisk) ? 1 : 0) + (has(self.persistentVolumeClaim) ? 1 : 0) + (has(self.dataVolume) ? 1 : 0) + (has(self.cloudInitConfigDrive) ? 1 : 0) + (has(self.sysprep) ? 1 : 0) + (has(self.ephemeral) ? 1 : 0) + (has(self.configMap) ? 1 : 0) + (has(self.secret) ? 1 : 0) + (has(self.serviceAccount) ? 1 : 0) + (has(self.downwardAPI) ? 1 : 0) + (has(self.downwardMetrics) ? 1 : 0) + (has(self.memoryDump) ? 1 : 0) == 1",message="a volume has exactly one source"
type Volume struct {
	// Name is referenced by a disk.
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// ContainerDisk is a disk image shipped in a container image, used
	// read-only under a throw-away overlay.
	// +optional
	ContainerDisk *ContainerDiskSource `json:"containerDisk,omitempty"`
	// CloudInitNoCloud builds a "cidata" ISO for cloud-init.
	// +optional
	CloudInitNoCloud *CloudInitNoCloudSource `json:"cloudInitNoCloud,omitempty"`
	// EmptyDisk is a blank disk that lives and dies with the VMI.
	// +optional
	EmptyDisk *EmptyDiskSource `json:"emptyDisk,omitempty"`
	// HostDisk is a disk image file on the node.
	// +optional
	HostDisk *HostDisk `json:"hostDisk,omitempty"`
	// PersistentVolumeClaim is a file or block device from a PVC.
	// +optional
	PersistentVolumeClaim *PersistentVolumeClaimVolumeSource `json:"persistentVolumeClaim,omitempty"`
	// Ephemeral is a PVC used read-only under a throw-away overlay: the
	// guest's writes live and die with the VMI.
	// +optional
	Ephemeral *EphemeralVolumeSource `json:"ephemeral,omitempty"`

	// ConfigMap is a ConfigMap of the VMI's namespace as an ISO image
	// (label volumeLabel, else "cfgdata"), one file per key, as KubeVirt
	// builds it; the content is the ConfigMap's when the VMI started.
	// +optional
	ConfigMap *ConfigMapVolumeSource `json:"configMap,omitempty"`
	// Secret is a Secret of the VMI's namespace as an ISO image, like
	// configMap.
	// +optional
	Secret *SecretVolumeSource `json:"secret,omitempty"`
	// ServiceAccount is a ServiceAccount's token, ca.crt and namespace as
	// an ISO image: the launcher Pod runs as that ServiceAccount.
	// +optional
	ServiceAccount *ServiceAccountVolumeSource `json:"serviceAccount,omitempty"`
	// DownwardAPI is the launcher Pod's downward API files as an ISO image.
	// +optional
	DownwardAPI *DownwardAPIVolumeSource `json:"downwardAPI,omitempty"`
	// CloudInitConfigDrive builds a "config-2" ISO (OpenStack config drive)
	// for cloud-init.
	// +optional
	CloudInitConfigDrive *CloudInitConfigDriveSource `json:"cloudInitConfigDrive,omitempty"`
	// Sysprep is a ConfigMap or Secret holding autounattend.xml (or
	// unattend.xml) as an ISO image labelled "unattendCD".
	// +optional
	Sysprep *SysprepSource `json:"sysprep,omitempty"`

	// DataVolume is the PVC of a CDI DataVolume of this name, used as
	// persistentVolumeClaim uses a claim; the VMI's launcher Pod waits
	// until the DataVolume (or, without CDI, the claim) is ready
	// (docs/api.md#datavolumes).
	// +optional
	DataVolume *DataVolumeSource `json:"dataVolume,omitempty"`

	// ContainerPath shares a directory the launcher container mounts
	// (a volumeMount of its Pod that another admission webhook added, such
	// as a cloud provider's token projection) with the guest, read-only,
	// through virtiofs only (docs/api.md#filesystems).
	// +optional
	ContainerPath *ContainerPathVolumeSource `json:"containerPath,omitempty"`
	// DownwardMetrics is a read-only disk in vhostmd's format holding the
	// node's and this VM's metrics (KubeVirt's list), refreshed by the
	// launcher every 5 seconds; the guest reads it with vm-dump-metrics.
	// Its disk must be a virtio disk.
	// +optional
	DownwardMetrics *DownwardMetricsVolumeSource `json:"downwardMetrics,omitempty"`

	MemoryDump *Unsupported `json:"memoryDump,omitempty"`
}

// DownwardMetricsVolumeSource is the downward metrics disk; it has no
// settings.
type DownwardMetricsVolumeSource struct{}

// Filesystem is a volume shared with the guest as a file system
// (KubeVirt's).
type Filesystem struct {
	// Name is the volume shared, and the tag the guest mounts
	// (mount -t virtiofs <name> <dir>): at most 36 characters.
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Virtiofs is the only kind: a virtio-fs device.
	Virtiofs *FilesystemVirtiofs `json:"virtiofs"`
}

// FilesystemVirtiofs has no settings.
type FilesystemVirtiofs struct{}

// ContainerPathVolumeSource is a path of the launcher container (KubeVirt's
// virt-launcher container).
type ContainerPathVolumeSource struct {
	// Path is an absolute path the launcher container has a mount at.
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule="self.startsWith('/')",message="path must be absolute (start with '/')"
	// +kubebuilder:validation:XValidation:rule="!self.contains('..')",message="path must not contain '..'"
	Path string `json:"path"`
	// ReadOnly must be true (the default): the guest only reads it.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == true",message="readOnly must be true, write access is not supported"
	ReadOnly *bool `json:"readOnly,omitempty"`
}

// ConfigMapVolumeSource names a ConfigMap of the VMI's namespace.
type ConfigMapVolumeSource struct {
	// Name of the ConfigMap.
	Name string `json:"name"`
	// Optional: a missing ConfigMap gives an empty image instead of a
	// launcher Pod that cannot start.
	// +optional
	Optional *bool `json:"optional,omitempty"`
	// VolumeLabel is the ISO's volume identifier; default "cfgdata".
	// +optional
	// +kubebuilder:validation:MaxLength=32
	VolumeLabel string `json:"volumeLabel,omitempty"`
}

// SecretVolumeSource names a Secret of the VMI's namespace.
type SecretVolumeSource struct {
	// SecretName is the Secret's name.
	SecretName string `json:"secretName"`
	// Optional: a missing Secret gives an empty image.
	// +optional
	Optional *bool `json:"optional,omitempty"`
	// VolumeLabel is the ISO's volume identifier; default "cfgdata".
	// +optional
	// +kubebuilder:validation:MaxLength=32
	VolumeLabel string `json:"volumeLabel,omitempty"`
}

// ServiceAccountVolumeSource names a ServiceAccount of the VMI's namespace.
type ServiceAccountVolumeSource struct {
	// ServiceAccountName is the ServiceAccount's name.
	ServiceAccountName string `json:"serviceAccountName"`
}

// DownwardAPIVolumeSource lists downward API files of the launcher Pod
// (which carries the VMI's labels and annotations).
type DownwardAPIVolumeSource struct {
	// Fields are the files: path and fieldRef, as in a Pod's downwardAPI
	// volume.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Fields []corev1.DownwardAPIVolumeFile `json:"fields,omitempty"`
	// VolumeLabel is the ISO's volume identifier; default "cfgdata".
	// +optional
	// +kubebuilder:validation:MaxLength=32
	VolumeLabel string `json:"volumeLabel,omitempty"`
}

// CloudInitConfigDriveSource is cloud-init data for the OpenStack
// ConfigDrive data source; the same fields as cloudInitNoCloud.
// +kubebuilder:validation:XValidation:rule="(has(self.userData) ? 1 : 0) + (has(self.userDataBase64) ? 1 : 0) + (has(self.secretRef) ? 1 : 0) <= 1",message="userData, userDataBase64 and secretRef are mutually exclusive"
// +kubebuilder:validation:XValidation:rule="!(has(self.networkData) && has(self.networkDataBase64))",message="networkData and networkDataBase64 are mutually exclusive"
type CloudInitConfigDriveSource struct {
	// UserData is the cloud-init user-data, inline.
	// +optional
	UserData string `json:"userData,omitempty"`
	// UserDataBase64 is the user-data, base64-encoded.
	// +optional
	UserDataBase64 string `json:"userDataBase64,omitempty"`
	// SecretRef names a Secret holding "userdata" (or "userData") and optionally
	// "networkdata" (or "networkData").
	// +optional
	SecretRef *corev1.LocalObjectReference `json:"secretRef,omitempty"`
	// NetworkData is the network configuration (network_data.json), inline.
	// +optional
	NetworkData string `json:"networkData,omitempty"`
	// NetworkDataBase64 is the network configuration, base64-encoded.
	// +optional
	NetworkDataBase64 string `json:"networkDataBase64,omitempty"`

	NetworkDataSecretRef *Unsupported `json:"networkDataSecretRef,omitempty"`
}

// SysprepSource is a ConfigMap or a Secret (exactly one) holding a Windows
// answer file.
// +kubebuilder:validation:XValidation:rule="(has(self.configMap) ? 1 : 0) + (has(self.secret) ? 1 : 0) == 1",message="sysprep names exactly one of configMap and secret"
type SysprepSource struct {
	// Secret names a Secret of the VMI's namespace.
	// +optional
	Secret *corev1.LocalObjectReference `json:"secret,omitempty"`
	// ConfigMap names a ConfigMap of the VMI's namespace.
	// +optional
	ConfigMap *corev1.LocalObjectReference `json:"configMap,omitempty"`
}

// ContainerDiskSource is a disk image inside a container image.
type ContainerDiskSource struct {
	// Image is the container image reference.
	Image string `json:"image"`
	// Path of the disk image inside the container; default: the single file
	// under /disk/.
	// +optional
	Path string `json:"path,omitempty"`
	// ImagePullPolicy as for containers.
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	ImagePullSecret *UnsupportedScalar `json:"imagePullSecret,omitempty"`
}

// CloudInitNoCloudSource is cloud-init NoCloud data.
// +kubebuilder:validation:XValidation:rule="(has(self.userData) ? 1 : 0) + (has(self.userDataBase64) ? 1 : 0) + (has(self.secretRef) ? 1 : 0) <= 1",message="userData, userDataBase64 and secretRef are mutually exclusive"
// +kubebuilder:validation:XValidation:rule="!(has(self.networkData) && has(self.networkDataBase64))",message="networkData and networkDataBase64 are mutually exclusive"
type CloudInitNoCloudSource struct {
	// UserData is the cloud-init user-data, inline.
	// +optional
	UserData string `json:"userData,omitempty"`
	// UserDataBase64 is the user-data, base64-encoded.
	// +optional
	UserDataBase64 string `json:"userDataBase64,omitempty"`
	// SecretRef names a Secret holding "userdata" (or "userData") and optionally
	// "networkdata" (or "networkData").
	// +optional
	SecretRef *corev1.LocalObjectReference `json:"secretRef,omitempty"`
	// NetworkData is the cloud-init network-config, inline.
	// +optional
	NetworkData string `json:"networkData,omitempty"`
	// NetworkDataBase64 is the network-config, base64-encoded.
	// +optional
	NetworkDataBase64 string `json:"networkDataBase64,omitempty"`

	NetworkDataSecretRef *Unsupported `json:"networkDataSecretRef,omitempty"`
}

// EmptyDiskSource is a blank disk of a given size.
type EmptyDiskSource struct {
	// Capacity of the disk.
	Capacity resource.Quantity `json:"capacity"`
}

// HostDiskType says whether a host disk must exist.
// +kubebuilder:validation:Enum=Disk;DiskOrCreate
type HostDiskType string

// Host disk types.
const (
	HostDiskExists         HostDiskType = "Disk"
	HostDiskExistsOrCreate HostDiskType = "DiskOrCreate"
)

// HostDisk is a raw disk image file on the node.
type HostDisk struct {
	// Path of the image file on the node.
	Path string `json:"path"`
	// Type: Disk (must exist) or DiskOrCreate (created sparse with capacity).
	Type HostDiskType `json:"type"`
	// Capacity of a disk created by DiskOrCreate.
	// +optional
	Capacity *resource.Quantity `json:"capacity,omitempty"`

	Shared *UnsupportedBool `json:"shared,omitempty"`
}

// PersistentVolumeClaimVolumeSource is a PVC, as file system (disk.img) or block.
type PersistentVolumeClaimVolumeSource struct {
	// ClaimName is the PVC's name in the VMI's namespace.
	ClaimName string `json:"claimName"`
	// ReadOnly attaches the claim read-only.
	// +optional
	ReadOnly bool `json:"readOnly,omitempty"`

	Hotpluggable *UnsupportedBool `json:"hotpluggable,omitempty"`
}

// DataVolumeSource names a CDI DataVolume of the VMI's namespace; the
// volume is the PVC of the same name, as file system (disk.img) or block.
type DataVolumeSource struct {
	// Name of both the DataVolume and its PVC.
	Name string `json:"name"`

	Hotpluggable *UnsupportedBool `json:"hotpluggable,omitempty"`
}

// EphemeralVolumeSource is a PVC under a throw-away qcow2 overlay.
type EphemeralVolumeSource struct {
	// PersistentVolumeClaim is the claim, as file system (disk.img) or
	// block; the launcher Pod mounts it read-only whatever readOnly says.
	// +optional
	PersistentVolumeClaim *corev1.PersistentVolumeClaimVolumeSource `json:"persistentVolumeClaim,omitempty"`
}

// Network is a named network an interface attaches.
// +kubebuilder:validation:XValidation:rule="(has(self.pod) ? 1 : 0) + (has(self.multus) ? 1 : 0) == 1",message="a network has exactly one source: pod or multus"
type Network struct {
	// Name is referenced by an interface.
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Pod is the Pod's own network.
	// +optional
	Pod *PodNetwork `json:"pod,omitempty"`

	// Multus is a NetworkAttachmentDefinition attached through Multus: a
	// secondary Pod interface, or the Pod's primary one with default.
	// +optional
	Multus *MultusNetwork `json:"multus,omitempty"`
}

// MultusNetwork is a network of Multus CNI, as KubeVirt's.
type MultusNetwork struct {
	// NetworkName is the NetworkAttachmentDefinition: "name" (the VMI's
	// namespace) or "namespace/name".
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	NetworkName string `json:"networkName"`
	// Default makes this network the Pod's primary one (Multus's
	// v1.multus-cni.io/default-network annotation) instead of the
	// cluster network; a VMI with it has no pod network.
	// +optional
	Default bool `json:"default,omitempty"`
}

// PodNetwork is the Pod's network.
type PodNetwork struct {
	// VMNetworkCIDR is the guest's IPv4 network behind masquerade
	// (default 10.0.2.0/24; the guest gets .2).
	// +optional
	VMNetworkCIDR string `json:"vmNetworkCIDR,omitempty"`

	VMIPv6NetworkCIDR *UnsupportedScalar `json:"vmIPv6NetworkCIDR,omitempty"`
}

// VirtualMachineInstancePhase is where a VMI is in its life.
// +kubebuilder:validation:Enum="";Pending;Scheduling;Scheduled;Running;Succeeded;Failed;Unknown
type VirtualMachineInstancePhase string

// VMI phases.
const (
	VmPhaseUnset VirtualMachineInstancePhase = ""
	Pending      VirtualMachineInstancePhase = "Pending"
	Scheduling   VirtualMachineInstancePhase = "Scheduling"
	Scheduled    VirtualMachineInstancePhase = "Scheduled"
	Running      VirtualMachineInstancePhase = "Running"
	Succeeded    VirtualMachineInstancePhase = "Succeeded"
	Failed       VirtualMachineInstancePhase = "Failed"
	Unknown      VirtualMachineInstancePhase = "Unknown"
)

// IsFinal says whether the VMI has ended for good.
func (p VirtualMachineInstancePhase) IsFinal() bool { return p == Succeeded || p == Failed }

// VirtualMachineInstanceStatus is what the controller and node agent observed.
type VirtualMachineInstanceStatus struct {
	// Phase is where the VMI is in its life.
	// +optional
	Phase VirtualMachineInstancePhase `json:"phase,omitempty"`
	// PhaseTransitionTimestamps records when each phase was entered.
	// +optional
	PhaseTransitionTimestamps []VirtualMachineInstancePhaseTransitionTimestamp `json:"phaseTransitionTimestamps,omitempty"`
	// Conditions: Ready, Paused, AgentConnected, LiveMigratable,
	// SoftwareEmulation, Synchronized.
	// +optional
	Conditions []VirtualMachineInstanceCondition `json:"conditions,omitempty"`
	// NodeName is the node the VMI runs on.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// Reason is a short, machine-readable reason for the phase.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Interfaces as seen from the guest agent or the launcher.
	// +optional
	Interfaces []VirtualMachineInstanceNetworkInterface `json:"interfaces,omitempty"`
	// GuestOSInfo from the guest agent.
	// +optional
	GuestOSInfo VirtualMachineInstanceGuestOSInfo `json:"guestOSInfo,omitempty"`
	// MigrationState of the latest migration.
	// +optional
	MigrationState *VirtualMachineInstanceMigrationState `json:"migrationState,omitempty"`
	// LauncherPod is the name of the Pod running the VM (kemu addition).
	// +optional
	LauncherPod string `json:"launcherPod,omitempty"`
	// ActivePods maps launcher Pod UIDs to their node names.
	// +optional
	ActivePods map[types.UID]string `json:"activePods,omitempty"`
	// QOSClass of the launcher Pod.
	// +optional
	QOSClass *corev1.PodQOSClass `json:"qosClass,omitempty"`
	// SelinuxContext is QEMU's SELinux process label, "none" when SELinux
	// is disabled on the node.
	// +optional
	SelinuxContext string `json:"selinuxContext,omitempty"`
	// EvacuationNodeName is the node the VMI must leave (cordoned or
	// drained), set by the controller until a migration moved it.
	// +optional
	EvacuationNodeName string `json:"evacuationNodeName,omitempty"`
}

// VirtualMachineInstancePhaseTransitionTimestamp records a phase change.
type VirtualMachineInstancePhaseTransitionTimestamp struct {
	// +optional
	Phase VirtualMachineInstancePhase `json:"phase,omitempty"`
	// +optional
	PhaseTransitionTimestamp metav1.Time `json:"phaseTransitionTimestamp,omitempty"`
}

// VirtualMachineInstanceConditionType names a VMI condition.
type VirtualMachineInstanceConditionType string

// VMI conditions.
const (
	VirtualMachineInstanceReady             VirtualMachineInstanceConditionType = "Ready"
	VirtualMachineInstancePaused            VirtualMachineInstanceConditionType = "Paused"
	VirtualMachineInstanceAgentConnected    VirtualMachineInstanceConditionType = "AgentConnected"
	VirtualMachineInstanceIsMigratable      VirtualMachineInstanceConditionType = "LiveMigratable"
	VirtualMachineInstanceSoftwareEmulation VirtualMachineInstanceConditionType = "SoftwareEmulation"
	VirtualMachineInstanceSynchronized      VirtualMachineInstanceConditionType = "Synchronized"
	// VirtualMachineInstanceDevicesConfined (kemu addition) is True while
	// QEMU runs under its cgroup v2 device allowlist and False, reason
	// NoDeviceCgroup, when the launcher was told to run without it.
	VirtualMachineInstanceDevicesConfined VirtualMachineInstanceConditionType = "DevicesConfined"
	// VirtualMachineInstanceLauncherUnverified (kemu addition) is True while
	// the node agent refuses what it found at the VMI's launcher socket (a
	// symlink on the way, not a socket, a process outside the launcher
	// Pod's cgroup, a launcher of another VMI): it sends that launcher no
	// command. The reason names the failed check, the message what was
	// found. Removed once the Pod's own launcher answers.
	VirtualMachineInstanceLauncherUnverified VirtualMachineInstanceConditionType = "LauncherUnverified"
	// VirtualMachineInstanceDataVolumesReady (KubeVirt's) is on a VMI with
	// dataVolume volumes (or claims a DataVolume controls): True, reason
	// AllDVsReady, once every one is ready for the launcher Pod; False,
	// NotAllDVsReady, with what is waited for, while not.
	VirtualMachineInstanceDataVolumesReady VirtualMachineInstanceConditionType = "DataVolumesReady"
)

// Reasons of the DataVolumesReady condition (KubeVirt's).
const (
	VirtualMachineInstanceReasonAllDVsReady    = "AllDVsReady"
	VirtualMachineInstanceReasonNotAllDVsReady = "NotAllDVsReady"
)

// VirtualMachineInstanceCondition is one condition of a VMI.
type VirtualMachineInstanceCondition struct {
	Type   VirtualMachineInstanceConditionType `json:"type"`
	Status corev1.ConditionStatus              `json:"status"`
	// +optional
	LastProbeTime metav1.Time `json:"lastProbeTime,omitempty"`
	// +optional
	LastTransitionTime metav1.Time `json:"lastTransitionTime,omitempty"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
}

// VirtualMachineInstanceNetworkInterface is an interface as observed.
type VirtualMachineInstanceNetworkInterface struct {
	// Name of the interface in the VMI spec.
	// +optional
	Name string `json:"name,omitempty"`
	// MAC address.
	// +optional
	MAC string `json:"mac,omitempty"`
	// IPAddress is the primary IP.
	// +optional
	IPAddress string `json:"ipAddress,omitempty"`
	// IPAddresses are all IPs.
	// +optional
	IPAddresses []string `json:"ipAddresses,omitempty"`
	// InterfaceName inside the guest.
	// +optional
	InterfaceName string `json:"interfaceName,omitempty"`
	// InfoSource says where the data came from: domain, guest-agent, or both
	// (comma-separated).
	// +optional
	InfoSource string `json:"infoSource,omitempty"`
	// LinkState is the NIC's current link state: up or down.
	// +optional
	LinkState string `json:"linkState,omitempty"`
}

// VirtualMachineInstanceGuestOSInfo is the guest OS as the agent reports it.
type VirtualMachineInstanceGuestOSInfo struct {
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	KernelRelease string `json:"kernelRelease,omitempty"`
	// +optional
	Version string `json:"version,omitempty"`
	// +optional
	PrettyName string `json:"prettyName,omitempty"`
	// +optional
	VersionID string `json:"versionId,omitempty"`
	// +optional
	KernelVersion string `json:"kernelVersion,omitempty"`
	// +optional
	Machine string `json:"machine,omitempty"`
	// +optional
	ID string `json:"id,omitempty"`
}

// MigrationMode is how memory moves.
type MigrationMode string

// Migration modes.
const (
	MigrationPreCopy  MigrationMode = "PreCopy"
	MigrationPostCopy MigrationMode = "PostCopy"
)

// MigrationAbortStatus is the state of a cancellation.
type MigrationAbortStatus string

// Migration abort states.
const (
	MigrationAbortSucceeded  MigrationAbortStatus = "Succeeded"
	MigrationAbortFailed     MigrationAbortStatus = "Failed"
	MigrationAbortInProgress MigrationAbortStatus = "Aborting"
)

// VirtualMachineInstanceMigrationState is the state of a VMI's migration.
type VirtualMachineInstanceMigrationState struct {
	// +optional
	StartTimestamp *metav1.Time `json:"startTimestamp,omitempty"`
	// +optional
	EndTimestamp *metav1.Time `json:"endTimestamp,omitempty"`
	// +optional
	TargetNodeDomainDetected bool `json:"targetNodeDomainDetected,omitempty"`
	// +optional
	TargetNodeDomainReadyTimestamp *metav1.Time `json:"targetNodeDomainReadyTimestamp,omitempty"`
	// +optional
	TargetNodeAddress string `json:"targetNodeAddress,omitempty"`
	// +optional
	TargetNode string `json:"targetNode,omitempty"`
	// +optional
	TargetPod string `json:"targetPod,omitempty"`
	// +optional
	SourceNode string `json:"sourceNode,omitempty"`
	// +optional
	SourcePod string `json:"sourcePod,omitempty"`
	// +optional
	Completed bool `json:"completed,omitempty"`
	// +optional
	Failed bool `json:"failed,omitempty"`
	// +optional
	AbortRequested bool `json:"abortRequested,omitempty"`
	// +optional
	AbortStatus MigrationAbortStatus `json:"abortStatus,omitempty"`
	// +optional
	FailureReason string `json:"failureReason,omitempty"`
	// +optional
	MigrationUID types.UID `json:"migrationUid,omitempty"`
	// +optional
	Mode MigrationMode `json:"mode,omitempty"`
	// MigrationConfiguration is the policy this migration runs with (the
	// controller's from kemu-config), as KubeVirt records it.
	// +optional
	MigrationConfiguration *MigrationConfiguration `json:"migrationConfiguration,omitempty"`
	// TargetMigrationPort is the TCP port of the target node agent's
	// migration proxy at TargetNodeAddress (kemu addition; KubeVirt's
	// per-port map has no meaning with one mutually authenticated proxy).
	// +optional
	TargetMigrationPort int32 `json:"targetMigrationPort,omitempty"`
	// Statistics are QEMU's figures of the migration, as the source
	// measured them: progress while it runs, final once completed (kemu
	// addition).
	// +optional
	Statistics *MigrationStatistics `json:"statistics,omitempty"`
}

// MigrationConfiguration is a migration's policy (KubeVirt's
// migrationConfiguration fields kemu implements).
type MigrationConfiguration struct {
	// BandwidthPerMigration caps the transfer, bytes per second; 0 or
	// absent: unlimited.
	// +optional
	BandwidthPerMigration *resource.Quantity `json:"bandwidthPerMigration,omitempty"`
	// CompletionTimeoutPerGiB: seconds per GiB of RAM and copied disks the
	// whole migration may take (default 150).
	// +optional
	CompletionTimeoutPerGiB *int64 `json:"completionTimeoutPerGiB,omitempty"`
	// ProgressTimeout: seconds without a decrease of the remaining data
	// before the migration is canceled (default 150).
	// +optional
	ProgressTimeout *int64 `json:"progressTimeout,omitempty"`
	// +optional
	AllowAutoConverge *bool `json:"allowAutoConverge,omitempty"`
	// +optional
	AllowPostCopy *bool `json:"allowPostCopy,omitempty"`
}

// MigrationStatistics are a migration's figures from QEMU (kemu addition).
type MigrationStatistics struct {
	// RAM: total, transferred and remaining bytes, and the completed
	// passes over memory.
	// +optional
	DataTotalBytes int64 `json:"dataTotalBytes,omitempty"`
	// +optional
	DataProcessedBytes int64 `json:"dataProcessedBytes,omitempty"`
	// +optional
	DataRemainingBytes int64 `json:"dataRemainingBytes,omitempty"`
	// +optional
	Passes int64 `json:"passes,omitempty"`
	// Disks copied to the target (containerDisk overlays, emptyDisks).
	// +optional
	DiskTotalBytes int64 `json:"diskTotalBytes,omitempty"`
	// +optional
	DiskProcessedBytes int64 `json:"diskProcessedBytes,omitempty"`
	// QEMU's times: the whole migration, the guest's pause at the
	// switchover, the setup.
	// +optional
	TotalMilliseconds int64 `json:"totalMilliseconds,omitempty"`
	// +optional
	DowntimeMilliseconds int64 `json:"downtimeMilliseconds,omitempty"`
	// +optional
	SetupMilliseconds int64 `json:"setupMilliseconds,omitempty"`
}
