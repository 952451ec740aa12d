package cmdline

import (
	"time"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// Facts are what the launcher found out about this node.
type Facts struct {
	Binary   string // e.g. "qemu-system-x86_64" (not part of the argv Build returns)
	Accel    string // "kvm" or "tcg", decided by the caller's probe
	OVMF     OVMF   // firmware files found on this host (FindOVMF)
	VhostNet bool   // /dev/vhost-net exists
	// Machines are QEMU's machine types (DetectMachines); nil = not
	// detected, the machine type is then left to QEMU to refuse.
	Machines Machines
	// CPU is what QEMU offers under Accel (DetectCPU); nil = not detected:
	// a named model is then left to QEMU, and cpu.features are refused.
	CPU *CPUFacts
}

// Accelerators.
const (
	AccelKVM = "kvm"
	AccelTCG = "tcg"
)

// Paths are the runtime files the launcher chose. Unix socket paths must fit
// in sun_path (at most 107 bytes).
type Paths struct {
	QMP, QMPDebug string // two QMP unix sockets: the launcher's and one for debugging ("" = none)
	// QMPFD is the launcher's QMP socket, made and listening, as QEMU
	// inherits it (3 or more); 0: QEMU creates QMP itself.
	QMPFD      int
	Serial     string // serial console unix socket; the launcher reads it
	GuestAgent string // qemu-ga virtio-serial chardev socket ("" = no agent channel)
	// DownwardMetrics is the downward metrics port's chardev socket;
	// required by spec.domain.devices.downwardMetrics.
	DownwardMetrics string
	VNC             string // VNC server unix socket; required when the VMI has graphics
	EFIVars         string // writable copy of the OVMF vars template (OVMF.Pick says which)
	Dir             string // the VM's runtime directory: filesystems' virtiofsd sockets (FilesystemSocket)
}

// Drive is a prepared volume: the file or block device QEMU opens.
type Drive struct {
	Path     string
	Format   string // "raw" or "qcow2"
	ReadOnly bool
	Block    bool // a block device: driver host_device instead of file
	// DirectIO: Path (and the file under it, for an overlay) can be
	// opened with O_DIRECT, so cache none is possible (and the default).
	DirectIO bool
	// Preallocated: Path is a file with every byte allocated (with cache
	// none, io native is then the default, as for a block device).
	Preallocated bool
}

// Drive formats.
const (
	FormatRaw   = "raw"
	FormatQCOW2 = "qcow2"
)

// KernelBoot are the kernel and initrd extracted for
// spec.domain.firmware.kernelBoot; the command line comes from the VMI.
type KernelBoot struct{ Kernel, Initrd string }

// NIC is a prepared network interface, for the VMI interface of the same name.
type NIC struct {
	Name     string   // the VMI interface name
	MAC      string   // "" = the interface's macAddress, or let QEMU choose
	Model    string   // "" = the interface's model; virtio, e1000, e1000e, rtl8139
	TapFDs   []int    // tap fd numbers in QEMU's process (inherited, ≥ 3); len>1 = multiqueue
	VhostFDs []int    // vhost-net fds, one per tap fd; only when Facts.VhostNet
	User     *UserNet // standalone mode (no taps): QEMU user networking (NAT)
	MTU      int      // the link's MTU, told to a virtio guest (host_mtu); 0 = not told
	PasstFD  int      // passt binding: QEMU's end of the socket pair with passt (inherited, ≥ 3); 0 = none
}

// UserNet is QEMU's user-mode (slirp) network: the guest gets the second
// address of Net (e.g. 10.0.2.2), the host side the first (10.0.2.1).
type UserNet struct {
	Net      string // IPv4 CIDR, e.g. "10.0.2.0/24" (the VMI's vmNetworkCIDR or DefaultUserNet)
	Forwards []Forward
}

// DefaultUserNet is the guest network when the VMI names none.
const DefaultUserNet = "10.0.2.0/24"

// Forward forwards a host port to the guest.
type Forward struct {
	Proto     string // "tcp" or "udp" (any case)
	HostAddr  string // IPv4 address to listen on; "" = all
	HostPort  int
	GuestPort int
}

// Input is everything Build needs.
type Input struct {
	VMI      *v1.VirtualMachineInstance // defaulted and validated
	Facts    Facts
	Paths    Paths
	Drives   map[string]Drive // by volume name; every disk's volume must be here
	Kernel   *KernelBoot      // when spec.domain.firmware.kernelBoot
	NICs     []NIC            // in VMI interface order, one per interface
	Incoming bool             // migration target: -incoming defer
	// Now is the VM's start, for -rtc base of spec.domain.clock (an
	// offset or a time zone); required then.
	Now time.Time
	// Placement: hugepages and guest NUMA nodes (build_placement.go).
	Placement Placement
}
