package v1alpha1

import (
	"strings"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Defaults that are not KubeVirt's own, or that KubeVirt leaves to cluster
// configuration, are decided here once for every component.
const (
	// DefaultMachineType is the machine type of a VMI that names none.
	DefaultMachineType = "q35"
	// DefaultCPUModel is the CPU model of a VMI that names none.
	DefaultCPUModel = CPUModeHostModel
	// DefaultTerminationGracePeriodSeconds is the guest's time to power off.
	DefaultTerminationGracePeriodSeconds int64 = 30
	// DefaultNetworkName names the pod network added when a VMI has none.
	DefaultNetworkName = "default"
	// DefaultInterfaceModel is the NIC model of an interface that names none.
	DefaultInterfaceModel = "virtio"
)

// firmwareUUIDNamespace seeds the name-based UUIDs of VMIs without
// firmware.uuid, so a VM keeps its SMBIOS UUID across restarts.
var firmwareUUIDNamespace = uuid.MustParse("4e3a1b2c-6f0d-5b7e-9c1a-6b656d752e64")

// DeriveFirmwareUUID returns the SMBIOS UUID kemu gives a VMI named name in
// namespace when its spec has none.
func DeriveFirmwareUUID(namespace, name string) types.UID {
	return types.UID(uuid.NewSHA1(firmwareUUIDNamespace, []byte(namespace+"/"+name)).String())
}

// SetVirtualMachineInstanceDefaults fills in what a VMI leaves out, following
// KubeVirt's rules. It is idempotent and never touches Unsupported fields.
func SetVirtualMachineInstanceDefaults(vmi *VirtualMachineInstance) {
	SetVirtualMachineInstanceSpecDefaults(&vmi.Spec, vmi.Namespace, vmi.Name)
}

// SetVirtualMachineDefaults fills in a VM: runStrategy from the deprecated
// running field (or Halted), and its template's VMI defaults.
func SetVirtualMachineDefaults(vm *VirtualMachine) {
	if vm.Spec.RunStrategy == nil {
		rs := RunStrategyHalted
		if vm.Spec.Running != nil {
			if *vm.Spec.Running {
				rs = RunStrategyAlways
			}
			vm.Spec.Running = nil
		}
		vm.Spec.RunStrategy = &rs
	}
	if vm.Spec.Template != nil {
		SetVirtualMachineInstanceSpecDefaults(&vm.Spec.Template.Spec, vm.Namespace, vm.Name)
	}
}

// SetVirtualMachineInstanceSpecDefaults fills in a VMI spec. name and
// namespace are the VMI's (or the VM's, for a template); an empty name leaves
// firmware.uuid for later.
func SetVirtualMachineInstanceSpecDefaults(spec *VirtualMachineInstanceSpec, namespace, name string) {
	if spec.TerminationGracePeriodSeconds == nil {
		grace := DefaultTerminationGracePeriodSeconds
		spec.TerminationGracePeriodSeconds = &grace
	}
	setDomainDefaults(&spec.Domain, namespace, name)
	setVolumeDefaults(spec)
	setNetworkDefaults(spec)
	setProbeDefaults(spec.ReadinessProbe)
	setProbeDefaults(spec.LivenessProbe)
}

// Probe defaults (KubeVirt's SetDefaults_Probe, Kubernetes' own).
const (
	DefaultProbeTimeoutSeconds   int32 = 1
	DefaultProbePeriodSeconds    int32 = 10
	DefaultProbeSuccessThreshold int32 = 1
	DefaultProbeFailureThreshold int32 = 3
)

// setProbeDefaults fills a probe's timeout, period and thresholds when
// they are under 1 (KubeVirt's rule), and an httpGet's scheme and path
// (the Pod's defaults), so the launcher Pod carries what the VMI shows.
func setProbeDefaults(p *Probe) {
	if p == nil {
		return
	}
	for _, f := range []struct {
		v   *int32
		def int32
	}{{&p.TimeoutSeconds, DefaultProbeTimeoutSeconds}, {&p.PeriodSeconds, DefaultProbePeriodSeconds},
		{&p.SuccessThreshold, DefaultProbeSuccessThreshold}, {&p.FailureThreshold, DefaultProbeFailureThreshold}} {
		if *f.v < 1 {
			*f.v = f.def
		}
	}
	if h := p.HTTPGet; h != nil {
		if h.Scheme == "" {
			h.Scheme = corev1.URISchemeHTTP
		}
		if h.Path == "" {
			h.Path = "/"
		}
	}
}

// VMIHostname is the host name of vmi's launcher Pod and guest:
// spec.hostname, else DeriveHostname of its name (KubeVirt's
// dns.SanitizeHostname).
func VMIHostname(vmi *VirtualMachineInstance) string {
	if vmi.Spec.Hostname != "" {
		return vmi.Spec.Hostname
	}
	return DeriveHostname(vmi.Name)
}

func setDomainDefaults(d *DomainSpec, namespace, name string) {
	if d.Machine == nil {
		d.Machine = &Machine{}
	}
	if d.Machine.Type == "" {
		d.Machine.Type = DefaultMachineType
	}

	if d.CPU == nil {
		d.CPU = &CPU{}
	}
	for _, n := range []*uint32{&d.CPU.Sockets, &d.CPU.Cores, &d.CPU.Threads} {
		if *n == 0 {
			*n = 1
		}
	}
	if d.CPU.Model == "" {
		d.CPU.Model = DefaultCPUModel
	}

	// memory.guest comes from limits, then requests; requests.memory from guest.
	if d.Memory == nil {
		d.Memory = &Memory{}
	}
	if d.Memory.Guest == nil {
		if q, ok := d.Resources.Limits[corev1.ResourceMemory]; ok {
			q := q.DeepCopy()
			d.Memory.Guest = &q
		} else if q, ok := d.Resources.Requests[corev1.ResourceMemory]; ok {
			q := q.DeepCopy()
			d.Memory.Guest = &q
		}
	}
	if _, ok := d.Resources.Requests[corev1.ResourceMemory]; !ok && d.Memory.Guest != nil {
		if d.Resources.Requests == nil {
			d.Resources.Requests = corev1.ResourceList{}
		}
		d.Resources.Requests[corev1.ResourceMemory] = d.Memory.Guest.DeepCopy()
	}

	if d.Firmware == nil {
		d.Firmware = &Firmware{}
	}
	if d.Firmware.UUID == "" && name != "" {
		d.Firmware.UUID = DeriveFirmwareUUID(namespace, name)
	}
	if b := d.Firmware.Bootloader; b != nil && b.EFI != nil && b.EFI.SecureBoot == nil {
		on := true
		b.EFI.SecureBoot = &on
	}
	if kb := d.Firmware.KernelBoot; kb != nil && kb.Container != nil && kb.Container.ImagePullPolicy == "" {
		kb.Container.ImagePullPolicy = DefaultPullPolicy(kb.Container.Image)
	}

	if d.Devices.AutoattachGraphicsDevice == nil {
		on := true
		d.Devices.AutoattachGraphicsDevice = &on
	}

	setDeviceDefaults(&d.Devices)

	if d.Features == nil {
		d.Features = &Features{}
	}
	if d.Features.ACPI.Enabled == nil {
		on := true
		d.Features.ACPI.Enabled = &on
	}
	setFeatureDefaults(d)
}

// setVolumeDefaults gives every volume without a disk a virtio disk and every
// disk without a target a virtio disk target, as KubeVirt does. A lun
// without a bus gets scsi: KubeVirt gives it its disks' default bus, but
// only scsi passes SCSI commands through (libvirt refuses device='lun' on
// sata, and QEMU's virtio-blk does so only as a legacy device).
func setVolumeDefaults(spec *VirtualMachineInstanceSpec) {
	AddVolumeDisks(spec)
	disks := &spec.Domain.Devices.Disks
	for i := range *disks {
		d := &(*disks)[i]
		if d.Disk == nil && d.CDRom == nil && d.LUN == nil {
			d.Disk = &DiskTarget{}
		}
		if d.Disk != nil && d.Disk.Bus == "" {
			d.Disk.Bus = DiskBusVirtio
		}
		if d.LUN != nil && d.LUN.Bus == "" {
			d.LUN.Bus = DiskBusSCSI
		}
		if d.CDRom != nil {
			if d.CDRom.Bus == "" {
				d.CDRom.Bus = DiskBusSATA
			}
			if d.CDRom.ReadOnly == nil {
				ro := true
				d.CDRom.ReadOnly = &ro
			}
		}
	}
	for i := range spec.Volumes {
		if cd := spec.Volumes[i].ContainerDisk; cd != nil && cd.ImagePullPolicy == "" {
			cd.ImagePullPolicy = DefaultPullPolicy(cd.Image)
		}
	}
}

// AddVolumeDisks gives every volume without a disk or filesystem a disk of
// its name (no target yet: defaulting makes it virtio, a preference its
// preferred bus).
func AddVolumeDisks(spec *VirtualMachineInstanceSpec) {
	disks := &spec.Domain.Devices.Disks
	hasDisk := map[string]bool{}
	for _, d := range *disks {
		hasDisk[d.Name] = true
	}
	for _, f := range spec.Domain.Devices.Filesystems {
		hasDisk[f.Name] = true
	}
	for _, v := range spec.Volumes {
		if !hasDisk[v.Name] && v.ContainerPath == nil { // a filesystem only
			*disks = append(*disks, Disk{Name: v.Name})
			hasDisk[v.Name] = true
		}
	}
}

// AddPodNetwork adds the pod network and its interface (no binding or model
// yet) when a VMI has no interfaces and no networks and
// autoattachPodInterface is not false.
func AddPodNetwork(spec *VirtualMachineInstanceSpec) {
	devs := &spec.Domain.Devices
	autoattach := devs.AutoattachPodInterface == nil || *devs.AutoattachPodInterface
	if autoattach && len(devs.Interfaces) == 0 && len(spec.Networks) == 0 {
		spec.Networks = []Network{{Name: DefaultNetworkName, Pod: &PodNetwork{}}}
		devs.Interfaces = []Interface{{Name: DefaultNetworkName}}
	}
}

// setNetworkDefaults adds the pod network behind masquerade when a VMI has no
// interfaces and no networks, and fills in bindings (masquerade; bridge on a
// Multus network), models and protocols.
func setNetworkDefaults(spec *VirtualMachineInstanceSpec) {
	AddPodNetwork(spec)
	devs := &spec.Domain.Devices
	for i := range devs.Interfaces {
		iface := &devs.Interfaces[i]
		if !iface.hasBinding() {
			if multusNetwork(spec.Networks, iface.Name) {
				iface.Bridge = &InterfaceBridge{} // the one binding of a Multus network
			} else {
				iface.Masquerade = &InterfaceMasquerade{}
			}
		}
		if iface.Model == "" {
			iface.Model = DefaultInterfaceModel
		}
		for j := range iface.Ports {
			if iface.Ports[j].Protocol == "" {
				iface.Ports[j].Protocol = "TCP"
			}
		}
	}
}

// multusNetwork says whether the network name is a Multus network.
func multusNetwork(nets []Network, name string) bool {
	for i := range nets {
		if nets[i].Name == name {
			return nets[i].Multus != nil
		}
	}
	return false
}

// HasBinding says whether the interface names its binding.
func (i *Interface) HasBinding() bool { return i.hasBinding() }

func (i *Interface) hasBinding() bool {
	return i.Bridge != nil || i.Masquerade != nil || i.Slirp != nil || i.SRIOV != nil ||
		i.Macvtap != nil || i.Passt != nil || i.PasstBinding != nil || i.Binding != nil
}

// SecureBoot says whether a firmware boots EFI with Secure Boot (unset
// secureBoot means on, KubeVirt's default).
func SecureBoot(fw *Firmware) bool {
	if fw == nil || fw.Bootloader == nil || fw.Bootloader.EFI == nil {
		return false
	}
	return fw.Bootloader.EFI.SecureBoot == nil || *fw.Bootloader.EFI.SecureBoot
}

// DefaultPullPolicy is Always for an image without a tag or tagged latest,
// IfNotPresent otherwise (Kubernetes' rule for containers).
func DefaultPullPolicy(image string) corev1.PullPolicy {
	if strings.Contains(image, "@") {
		return corev1.PullIfNotPresent
	}
	ref := image[strings.LastIndex(image, "/")+1:]
	tag := ""
	if i := strings.LastIndex(ref, ":"); i >= 0 {
		tag = ref[i+1:]
	}
	if tag == "" || tag == "latest" {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}

// setDeviceDefaults: KubeVirt's watchdog default (i6300esb, reset), the
// tablet autoattachInputDevice adds (KubeVirt's VM controller adds it,
// kemu's defaulting does so for every VMI), and an input's usb bus and
// tablet type.
func setDeviceDefaults(dev *Devices) {
	if w := dev.Watchdog; w != nil {
		if w.I6300ESB == nil && w.Diag288 == nil {
			w.I6300ESB = &I6300ESBWatchdog{}
		}
		if w.I6300ESB != nil && w.I6300ESB.Action == "" {
			w.I6300ESB.Action = WatchdogActionReset
		}
	}
	if on := dev.AutoattachInputDevice; on != nil && *on && len(dev.Inputs) == 0 {
		dev.Inputs = []Input{{Name: DefaultInputName}}
	}
	for i := range dev.Inputs {
		in := &dev.Inputs[i]
		if in.Bus == "" {
			in.Bus = InputBusUSB
		}
		if in.Type == "" {
			in.Type = InputTypeTablet
		}
	}
}
