package subresources

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// StatsKind is the kind of stats' reply.
const StatsKind = "VirtualMachineInstanceStats"

// VirtualMachineInstanceStats is stats' reply: a running VMI's resource
// figures as its node agent read them from the launcher at Time. Counters
// count from the VMI's start (a migrated VMI's from its arrival on the
// node), so a rate is the difference of two replies over the difference
// of their Time. Naming follows the kubelet's stats summary
// (usageCoreNanoSeconds, rxBytes, ...).
type VirtualMachineInstanceStats struct {
	metav1.TypeMeta `json:",inline"`
	// Time is when the node agent had the figures (its clock).
	Time   metav1.MicroTime `json:"time"`
	CPU    CPUStats         `json:"cpu"`
	Memory MemoryStats      `json:"memory"`
	// Interfaces are the VMI's pod-network interfaces (their taps), as
	// the guest's NIC sees them; none without one.
	Interfaces []InterfaceStats `json:"interfaces"`
	// Drives are the VMI's disks (spec.domain.devices.disks[].name).
	Drives []DriveStats `json:"drives"`
}

// CPUStats are CPU time counters, in nanoseconds.
type CPUStats struct {
	// UsageCoreNanoSeconds is the CPU time of all of QEMU's threads (its
	// cgroup); absent without one.
	UsageCoreNanoSeconds *int64 `json:"usageCoreNanoSeconds,omitempty"`
	// VCPUs is the number of vCPU threads; VCPUNanoSeconds their CPU time
	// in all (the guest's own work, as the host ran it).
	VCPUs           int32 `json:"vcpus"`
	VCPUNanoSeconds int64 `json:"vcpuNanoSeconds"`
}

// MemoryStats are memory figures in bytes. The Guest* ones are the
// guest's balloon driver's, each absent until the driver reported it (and
// always without a balloon or a driver).
type MemoryStats struct {
	// GuestTotalBytes is the memory the guest sees in all.
	GuestTotalBytes *int64 `json:"guestTotalBytes,omitempty"`
	// GuestAvailableBytes is what the guest could use without swapping.
	GuestAvailableBytes *int64 `json:"guestAvailableBytes,omitempty"`
	// GuestFreeBytes is what the guest leaves unused.
	GuestFreeBytes *int64 `json:"guestFreeBytes,omitempty"`
	// GuestUsedBytes is total less free (kemu_vmi_memory_used_bytes).
	GuestUsedBytes *int64 `json:"guestUsedBytes,omitempty"`
	// GuestUpdateTime is when the driver last reported (guest's figures
	// only).
	GuestUpdateTime *metav1.Time `json:"guestUpdateTime,omitempty"`
	// BalloonActualBytes is the memory the balloon leaves the guest;
	// absent without a balloon.
	BalloonActualBytes *int64 `json:"balloonActualBytes,omitempty"`
	// QEMUResidentBytes is QEMU's resident memory on the node.
	QEMUResidentBytes *int64 `json:"qemuResidentBytes,omitempty"`
}

// InterfaceStats are one interface's counters since the VMI started.
type InterfaceStats struct {
	// Name is the VMI's interface (spec.domain.devices.interfaces[].name).
	Name      string `json:"name"`
	RxBytes   int64  `json:"rxBytes"`
	RxPackets int64  `json:"rxPackets"`
	TxBytes   int64  `json:"txBytes"`
	TxPackets int64  `json:"txPackets"`
}

// DriveStats are one disk's counters since the VMI started.
type DriveStats struct {
	// Name is the VMI's disk (spec.domain.devices.disks[].name).
	Name       string `json:"name"`
	ReadBytes  int64  `json:"readBytes"`
	ReadOps    int64  `json:"readOps"`
	WriteBytes int64  `json:"writeBytes"`
	WriteOps   int64  `json:"writeOps"`
}
