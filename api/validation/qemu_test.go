package validation

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// kernelBoot gives vmi a kernel-boot container.
func kernelBoot(vmi *v1.VirtualMachineInstance, kernel, initrd, args string) {
	vmi.Spec.Domain.Firmware = &v1.Firmware{KernelBoot: &v1.KernelBoot{
		KernelArgs: args,
		Container:  &v1.KernelBootContainer{Image: "example/kernel:1", KernelPath: kernel, InitrdPath: initrd},
	}}
}

// sataDisks replaces vmi's disks with n SATA disks on emptyDisks (the first
// cdroms of them CD-ROMs).
func sataDisks(vmi *v1.VirtualMachineInstance, n, cdroms int) {
	d := &vmi.Spec.Domain.Devices
	d.Disks = nil
	vmi.Spec.Volumes = vmi.Spec.Volumes[1:] // keep cloud-init, as a virtio disk
	for i := range n {
		name := fmt.Sprintf("d%d", i)
		if i < cdroms {
			d.Disks = append(d.Disks, v1.Disk{Name: name, CDRom: &v1.CDRomTarget{Bus: v1.DiskBusSATA}})
		} else {
			d.Disks = append(d.Disks, v1.Disk{Name: name, Disk: &v1.DiskTarget{Bus: v1.DiskBusSATA}})
		}
		vmi.Spec.Volumes = append(vmi.Spec.Volumes, v1.Volume{Name: name, EmptyDisk: &v1.EmptyDiskSource{Capacity: resource.MustParse("1Mi")}})
	}
}

// virtioDisks adds n virtio disks on emptyDisks.
func virtioDisks(vmi *v1.VirtualMachineInstance, n int) {
	for i := range n {
		name := fmt.Sprintf("v%d", i)
		vmi.Spec.Domain.Devices.Disks = append(vmi.Spec.Domain.Devices.Disks, v1.Disk{Name: name})
		vmi.Spec.Volumes = append(vmi.Spec.Volumes, v1.Volume{Name: name, EmptyDisk: &v1.EmptyDiskSource{Capacity: resource.MustParse("1Mi")}})
	}
}

// podNetwork gives vmi the pod network with a masquerade interface on cidr.
func podNetwork(vmi *v1.VirtualMachineInstance, cidr string) {
	vmi.Spec.Networks = []v1.Network{{Name: "default", Pod: &v1.PodNetwork{VMNetworkCIDR: cidr}}}
	vmi.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "default", Masquerade: &v1.InterfaceMasquerade{}}}
}

func cpus(vmi *v1.VirtualMachineInstance, machine string, sockets uint32) {
	vmi.Spec.Domain.Machine = &v1.Machine{Type: machine}
	vmi.Spec.Domain.CPU = &v1.CPU{Sockets: sockets, Cores: 1, Threads: 1}
}

// qemuRefusals: what the launcher's QEMU (or exec, qemu-img, kemu-copy)
// would refuse after the Pod started, refused by validation with the field
// (issue 13, item 7), next to the boundaries that still pass.
var qemuRefusals = []struct {
	name   string
	mutate func(*v1.VirtualMachineInstance)
	want   []string
}{
	{
		name: "bootOrder at QEMU's int32 bootindex limit",
		mutate: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Disks[0].BootOrder = ptr(uint(MaxBootOrder))
		},
	},
	{
		name: "bootOrder beyond QEMU's int32 bootindex",
		mutate: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Disks[0].BootOrder = ptr(uint(MaxBootOrder) + 1)
		},
		want: []string{"Invalid value spec.domain.devices.disks[0].bootOrder"},
	},
	{
		name:   "six SATA devices fill the AHCI ports",
		mutate: func(vmi *v1.VirtualMachineInstance) { sataDisks(vmi, 6, 2) },
	},
	{
		name:   "a seventh SATA device",
		mutate: func(vmi *v1.VirtualMachineInstance) { sataDisks(vmi, 7, 2) },
		want:   []string{"Invalid value spec.domain.devices.disks[6].disk.bus"},
	},
	{
		name:   "a seventh SATA device that is a CD-ROM",
		mutate: func(vmi *v1.VirtualMachineInstance) { sataDisks(vmi, 7, 7) },
		want:   []string{"Invalid value spec.domain.devices.disks[6].cdrom.bus"},
	},
	{
		name: "read-only SATA disk",
		mutate: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Disks[0].Disk = &v1.DiskTarget{Bus: v1.DiskBusSATA, ReadOnly: true}
		},
		want: []string{"Invalid value spec.domain.devices.disks[0].disk.readonly"},
	},
	{
		name: "cloud-init (a read-only ISO) as a SATA disk",
		mutate: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Disks = append(vmi.Spec.Domain.Devices.Disks, v1.Disk{Name: "ci", Disk: &v1.DiskTarget{Bus: v1.DiskBusSATA}})
		},
		want: []string{"Invalid value spec.domain.devices.disks[1].disk.bus"},
	},
	{
		name: "cloud-init as a SATA CD-ROM",
		mutate: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Disks = append(vmi.Spec.Domain.Devices.Disks, v1.Disk{Name: "ci", CDRom: &v1.CDRomTarget{Bus: v1.DiskBusSATA}})
		},
	},
	{
		name: "read-only claim as a SATA disk",
		mutate: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Volumes[0] = v1.Volume{Name: "root", PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data", ReadOnly: true}}
			vmi.Spec.Domain.Devices.Disks[0].Disk.Bus = v1.DiskBusSATA
		},
		want: []string{"Invalid value spec.domain.devices.disks[0].disk.bus"},
	},
	{
		name: "a disk and an interface with the same name",
		mutate: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Disks[0].Name, vmi.Spec.Volumes[0].Name = "default", "default"
		},
		want: []string{"Invalid value spec.domain.devices.interfaces[0].name"},
	},
	{
		name: "two disks with one QEMU block node name",
		mutate: func(vmi *v1.VirtualMachineInstance) {
			long := strings.Repeat("a", MaxBlockNodeStem+1)
			stem := BlockNodeStem(long) // a valid DNS label of 25 characters
			vmi.Spec.Domain.Devices.Disks = []v1.Disk{{Name: long}, {Name: stem}, {Name: "ci"}}
			vmi.Spec.Volumes = append(vmi.Spec.Volumes,
				v1.Volume{Name: long, EmptyDisk: &v1.EmptyDiskSource{Capacity: resource.MustParse("1Mi")}},
				v1.Volume{Name: stem, EmptyDisk: &v1.EmptyDiskSource{Capacity: resource.MustParse("1Mi")}})
			vmi.Spec.Volumes = vmi.Spec.Volumes[1:]
		},
		want: []string{"Invalid value spec.domain.devices.disks[1].name"},
	},
	{
		name: "newline in kernelArgs",
		mutate: func(vmi *v1.VirtualMachineInstance) {
			kernelBoot(vmi, "/boot/vmlinuz", "", "console=ttyS0\ninit=/bin/sh")
		},
		want: []string{"Invalid value spec.domain.firmware.kernelBoot.kernelArgs"},
	},
	{
		name:   "NUL in kernelArgs",
		mutate: func(vmi *v1.VirtualMachineInstance) { kernelBoot(vmi, "/boot/vmlinuz", "", "quiet\x00") },
		want:   []string{"Invalid value spec.domain.firmware.kernelBoot.kernelArgs"},
	},
	{
		name: "kernelArgs beyond exec's argument limit",
		mutate: func(vmi *v1.VirtualMachineInstance) {
			kernelBoot(vmi, "/boot/vmlinuz", "", strings.Repeat("x", MaxArgLength+1))
		},
		want: []string{"Too long spec.domain.firmware.kernelBoot.kernelArgs"},
	},
	{
		name: "kernelArgs with commas, quotes and non-ASCII (one argument, as it is)",
		mutate: func(vmi *v1.VirtualMachineInstance) {
			kernelBoot(vmi, "/boot/vmlinuz", "/boot/initrd.img", `console=ttyS0,115200 x="a b" ü`)
		},
	},
	{
		name:   "control characters in kernel and initrd paths",
		mutate: func(vmi *v1.VirtualMachineInstance) { kernelBoot(vmi, "/boot/vm\tlinuz", "/boot/init\x7frd", "") },
		want: []string{
			"Invalid value spec.domain.firmware.kernelBoot.container.initrdPath",
			"Invalid value spec.domain.firmware.kernelBoot.container.kernelPath",
		},
	},
	{
		name:   "C1 control and invalid UTF-8 in paths",
		mutate: func(vmi *v1.VirtualMachineInstance) { kernelBoot(vmi, "/boot/vm\u0085linuz", "/boot/\xffinitrd", "") },
		want: []string{
			"Invalid value spec.domain.firmware.kernelBoot.container.initrdPath",
			"Invalid value spec.domain.firmware.kernelBoot.container.kernelPath",
		},
	},
	{
		name: "control characters in hostDisk and containerDisk paths",
		mutate: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Volumes[0].ContainerDisk.Path = "/disk/a\x00b"
			vmi.Spec.Domain.Devices.Disks = append(vmi.Spec.Domain.Devices.Disks, v1.Disk{Name: "host"})
			vmi.Spec.Volumes = append(vmi.Spec.Volumes, v1.Volume{Name: "host", HostDisk: &v1.HostDisk{Path: "/var/disks/a\nb.img", Type: v1.HostDiskExists}})
		},
		want: []string{"Invalid value spec.volumes[0].containerDisk.path", "Invalid value spec.volumes[2].hostDisk.path"},
	},
	{
		name:   "containerDisk path that names no file",
		mutate: func(vmi *v1.VirtualMachineInstance) { vmi.Spec.Volumes[0].ContainerDisk.Path = "/" },
		want:   []string{"Invalid value spec.volumes[0].containerDisk.path"},
	},
	{
		name: "path element beyond NAME_MAX",
		mutate: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Volumes[0].ContainerDisk.Path = "/disk/" + strings.Repeat("n", MaxFileNameLength+1)
		},
		want: []string{"Invalid value spec.volumes[0].containerDisk.path"},
	},
	{
		name: "path beyond PATH_MAX",
		mutate: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Volumes[0].ContainerDisk.Path = strings.Repeat("/d", MaxPathLength/2+1)
		},
		want: []string{"Too long spec.volumes[0].containerDisk.path"},
	},
	{
		name:   "white space in an image",
		mutate: func(vmi *v1.VirtualMachineInstance) { vmi.Spec.Volumes[0].ContainerDisk.Image = "example/os:1 " },
		want:   []string{"Invalid value spec.volumes[0].containerDisk.image"},
	},
	{
		name:   "kernel and initrd with the same file name",
		mutate: func(vmi *v1.VirtualMachineInstance) { kernelBoot(vmi, "/boot/vmlinuz", "/initrd/vmlinuz", "") },
		want:   []string{"Invalid value spec.domain.firmware.kernelBoot.container.initrdPath"},
	},
	{
		name:   "initrd with a comma (QEMU splits multiboot modules there)",
		mutate: func(vmi *v1.VirtualMachineInstance) { kernelBoot(vmi, "/boot/vmlinuz", "/boot/initrd,/etc/shadow", "") },
		want:   []string{"Invalid value spec.domain.firmware.kernelBoot.container.initrdPath"},
	},
	{
		name:   "initrd with a space (QEMU passes the rest to a multiboot module)",
		mutate: func(vmi *v1.VirtualMachineInstance) { kernelBoot(vmi, "/boot/vmlinuz", "/boot/initrd arg", "") },
		want:   []string{"Invalid value spec.domain.firmware.kernelBoot.container.initrdPath"},
	},
	{
		name:   "kernel with a comma and a space (taken as it is)",
		mutate: func(vmi *v1.VirtualMachineInstance) { kernelBoot(vmi, "/boot/vmlinuz,1 x", "/boot/initrd", "") },
	},
	{
		name:   "dotted VMI name",
		mutate: func(vmi *v1.VirtualMachineInstance) { vmi.Name = "web.example.com" },
	},
	{
		name:   "253-character VMI name",
		mutate: func(vmi *v1.VirtualMachineInstance) { vmi.Name = strings.Repeat(strings.Repeat("a", 62)+".", 4) + "a" },
	},
	{
		name: "VMI name and namespace that are no object names (a local manifest)",
		mutate: func(vmi *v1.VirtualMachineInstance) {
			vmi.Name, vmi.Namespace = "vm\n-name guest=x", "NS"
		},
		want: []string{"Invalid value metadata.name", "Invalid value metadata.namespace"},
	},
	{
		name: "firmware UUID in upper case",
		mutate: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Firmware = &v1.Firmware{UUID: "6BA7B810-9DAD-11D1-80B4-00C04FD430C8"}
		},
	},
	{
		name: "firmware UUID in braces (Go parses it, QEMU does not)",
		mutate: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Firmware = &v1.Firmware{UUID: "{6ba7b810-9dad-11d1-80b4-00c04fd430c8}"}
		},
		want: []string{"Invalid value spec.domain.firmware.uuid"},
	},
	{
		name: "firmware UUID as a URN",
		mutate: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Firmware = &v1.Firmware{UUID: "urn:uuid:6ba7b810-9dad-11d1-80b4-00c04fd430c8"}
		},
		want: []string{"Invalid value spec.domain.firmware.uuid"},
	},
	{
		name:   "CPU model help",
		mutate: func(vmi *v1.VirtualMachineInstance) { vmi.Spec.Domain.CPU = &v1.CPU{Model: "help"} },
		want:   []string{"Invalid value spec.domain.cpu.model"},
	},
	{
		name:   "machine type older than any QEMU's",
		mutate: func(vmi *v1.VirtualMachineInstance) { vmi.Spec.Domain.Machine = &v1.Machine{Type: "pc-q35-2.3"} },
		want:   []string{"Invalid value spec.domain.machine.type"},
	},
	{
		name:   "i440fx machine type older than any QEMU's",
		mutate: func(vmi *v1.VirtualMachineInstance) { vmi.Spec.Domain.Machine = &v1.Machine{Type: "pc-i440fx-1.3"} },
		want:   []string{"Invalid value spec.domain.machine.type"},
	},
	{
		// Not in QEMU 7.2, in 10.0: the node's QEMU decides (a launcher Pod
		// selects nodes labelled with it; the launcher refuses it otherwise).
		name:   "machine type of a newer QEMU",
		mutate: func(vmi *v1.VirtualMachineInstance) { vmi.Spec.Domain.Machine = &v1.Machine{Type: "pc-q35-10.0"} },
	},
	{
		name: "machine type version beyond any number",
		mutate: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Machine = &v1.Machine{Type: "pc-q35-99999999999999999999.0"}
		},
		want: []string{"Invalid value spec.domain.machine.type"},
	},
	{
		name:   "288 vCPUs on q35",
		mutate: func(vmi *v1.VirtualMachineInstance) { cpus(vmi, "pc-q35-7.2", 288) },
	},
	{
		name:   "256 vCPUs on pc-q35-2.7",
		mutate: func(vmi *v1.VirtualMachineInstance) { cpus(vmi, "pc-q35-2.7", 256) },
		want:   []string{"Invalid value spec.domain.cpu"},
	},
	{
		name:   "256 vCPUs on pc",
		mutate: func(vmi *v1.VirtualMachineInstance) { cpus(vmi, "pc", 256) },
		want:   []string{"Invalid value spec.domain.cpu"},
	},
	{
		name: "emptyDisk of 2Pi, qcow2's limit",
		mutate: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Volumes[0] = v1.Volume{Name: "root", EmptyDisk: &v1.EmptyDiskSource{Capacity: resource.MustParse("2Pi")}}
		},
	},
	{
		name: "emptyDisk beyond qcow2's limit",
		mutate: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Volumes[0] = v1.Volume{Name: "root", EmptyDisk: &v1.EmptyDiskSource{Capacity: resource.MustParse("3Pi")}}
		},
		want: []string{"Invalid value spec.volumes[0].emptyDisk.capacity"},
	},
	{
		name:   "30 PCI devices (26 virtio disks, a NIC, virtio-serial, balloon, VGA)",
		mutate: func(vmi *v1.VirtualMachineInstance) { virtioDisks(vmi, 24) },
	},
	{
		name:   "31 PCI devices",
		mutate: func(vmi *v1.VirtualMachineInstance) { virtioDisks(vmi, 24); vmi.Spec.Domain.Devices.Rng = &v1.Rng{} },
		want:   []string{"Invalid value spec.domain.devices"},
	},
	{
		name: "31 PCI devices less the balloon",
		mutate: func(vmi *v1.VirtualMachineInstance) {
			virtioDisks(vmi, 24)
			vmi.Spec.Domain.Devices.Rng = &v1.Rng{}
			vmi.Spec.Domain.Devices.AutoattachMemBalloon = ptr(false)
		},
	},
	{
		name: "31 PCI devices less the VGA device",
		mutate: func(vmi *v1.VirtualMachineInstance) {
			virtioDisks(vmi, 24)
			vmi.Spec.Domain.Devices.Rng = &v1.Rng{}
			vmi.Spec.Domain.Devices.AutoattachGraphicsDevice = ptr(false)
		},
	},
	{
		name: "an initrd without a kernel (QEMU: -initrd only allowed with -kernel)",
		mutate: func(vmi *v1.VirtualMachineInstance) {
			kernelBoot(vmi, "", "/boot/initrd.img", "")
		},
		want: []string{"Required value spec.domain.firmware.kernelBoot.container.kernelPath"},
	},
	{
		name:   "vmNetworkCIDR with a leading zero in the prefix length (netsetup's parser refuses it)",
		mutate: func(vmi *v1.VirtualMachineInstance) { podNetwork(vmi, "10.0.2.0/024") },
		want:   []string{"Invalid value spec.networks[0].pod.vmNetworkCIDR"},
	},
	{
		name:   "vmNetworkCIDR as IPv4-mapped IPv6",
		mutate: func(vmi *v1.VirtualMachineInstance) { podNetwork(vmi, "::ffff:10.0.0.0/16") },
		want:   []string{"Invalid value spec.networks[0].pod.vmNetworkCIDR"},
	},
	{
		name:   "vmNetworkCIDR with host bits",
		mutate: func(vmi *v1.VirtualMachineInstance) { podNetwork(vmi, "10.0.2.7/24") },
	},
	{
		name: "cloud-init secret name that leaves the secrets directory",
		mutate: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Volumes[1].CloudInitNoCloud = &v1.CloudInitNoCloudSource{SecretRef: &corev1.LocalObjectReference{Name: "../../../../usr/bin"}}
		},
		want: []string{"Invalid value spec.volumes[1].cloudInitNoCloud.secretRef.name"},
	},
}
