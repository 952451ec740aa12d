package v1alpha1

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func ptr[T any](v T) *T { return &v }

func TestSetVirtualMachineInstanceDefaults(t *testing.T) {
	q := resource.MustParse
	tests := []struct {
		name  string
		in    VirtualMachineInstanceSpec
		check func(t *testing.T, s *VirtualMachineInstanceSpec)
	}{
		{
			name: "empty spec gets KubeVirt's defaults",
			check: func(t *testing.T, s *VirtualMachineInstanceSpec) {
				d := s.Domain
				if d.Machine.Type != "q35" {
					t.Errorf("machine type %q", d.Machine.Type)
				}
				if d.CPU.Sockets != 1 || d.CPU.Cores != 1 || d.CPU.Threads != 1 || d.CPU.Model != "host-model" {
					t.Errorf("cpu %+v", *d.CPU)
				}
				if *s.TerminationGracePeriodSeconds != 30 {
					t.Errorf("grace %d", *s.TerminationGracePeriodSeconds)
				}
				if !*d.Features.ACPI.Enabled {
					t.Error("acpi off")
				}
				if g := d.Devices.AutoattachGraphicsDevice; g == nil || !*g {
					t.Errorf("autoattachGraphicsDevice %v, want true", g)
				}
				if d.Firmware.UUID != DeriveFirmwareUUID("ns", "vm") {
					t.Errorf("uuid %q", d.Firmware.UUID)
				}
				if len(s.Networks) != 1 || s.Networks[0].Pod == nil || s.Networks[0].Name != "default" {
					t.Errorf("networks %+v", s.Networks)
				}
				if len(d.Devices.Interfaces) != 1 || d.Devices.Interfaces[0].Masquerade == nil || d.Devices.Interfaces[0].Model != "virtio" {
					t.Errorf("interfaces %+v", d.Devices.Interfaces)
				}
			},
		},
		{
			name: "autoattachGraphicsDevice false is kept",
			in:   VirtualMachineInstanceSpec{Domain: DomainSpec{Devices: Devices{AutoattachGraphicsDevice: new(bool)}}},
			check: func(t *testing.T, s *VirtualMachineInstanceSpec) {
				if g := s.Domain.Devices.AutoattachGraphicsDevice; g == nil || *g {
					t.Errorf("autoattachGraphicsDevice %v, want false", g)
				}
			},
		},
		{
			name: "guest memory from requests, and requests from guest",
			in: VirtualMachineInstanceSpec{Domain: DomainSpec{Resources: ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceMemory: q("256Mi")},
			}}},
			check: func(t *testing.T, s *VirtualMachineInstanceSpec) {
				if g := s.Domain.Memory.Guest; g == nil || g.Cmp(q("256Mi")) != 0 {
					t.Errorf("guest %v", g)
				}
			},
		},
		{
			name: "guest memory from limits before requests",
			in: VirtualMachineInstanceSpec{Domain: DomainSpec{Resources: ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceMemory: q("128Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: q("512Mi")},
			}}},
			check: func(t *testing.T, s *VirtualMachineInstanceSpec) {
				if g := s.Domain.Memory.Guest; g.Cmp(q("512Mi")) != 0 {
					t.Errorf("guest %v", g)
				}
			},
		},
		{
			name: "requests memory from guest",
			in:   VirtualMachineInstanceSpec{Domain: DomainSpec{Memory: &Memory{Guest: ptr(q("1Gi"))}}},
			check: func(t *testing.T, s *VirtualMachineInstanceSpec) {
				if r := s.Domain.Resources.Requests[corev1.ResourceMemory]; r.Cmp(q("1Gi")) != 0 {
					t.Errorf("requests %v", r.String())
				}
			},
		},
		{
			name: "volume without a disk gets a virtio disk; cdrom gets sata, read-only",
			in: VirtualMachineInstanceSpec{
				Domain: DomainSpec{Devices: Devices{Disks: []Disk{{Name: "iso", CDRom: &CDRomTarget{}}, {Name: "plain"}}}},
				Volumes: []Volume{
					{Name: "iso", ContainerDisk: &ContainerDiskSource{Image: "iso:1"}},
					{Name: "plain", EmptyDisk: &EmptyDiskSource{Capacity: q("1Gi")}},
					{Name: "extra", ContainerDisk: &ContainerDiskSource{Image: "extra"}},
				},
			},
			check: func(t *testing.T, s *VirtualMachineInstanceSpec) {
				disks := s.Domain.Devices.Disks
				if len(disks) != 3 {
					t.Fatalf("disks %+v", disks)
				}
				if disks[0].CDRom.Bus != DiskBusSATA || !*disks[0].CDRom.ReadOnly || disks[0].Disk != nil {
					t.Errorf("cdrom %+v", disks[0])
				}
				if disks[1].Disk == nil || disks[1].Disk.Bus != DiskBusVirtio {
					t.Errorf("plain %+v", disks[1])
				}
				if disks[2].Name != "extra" || disks[2].Disk.Bus != DiskBusVirtio {
					t.Errorf("extra %+v", disks[2])
				}
				if p := s.Volumes[0].ContainerDisk.ImagePullPolicy; p != corev1.PullIfNotPresent {
					t.Errorf("tagged image pull policy %q", p)
				}
				if p := s.Volumes[2].ContainerDisk.ImagePullPolicy; p != corev1.PullAlways {
					t.Errorf("untagged image pull policy %q", p)
				}
			},
		},
		{
			name: "no pod interface when autoattach is off",
			in:   VirtualMachineInstanceSpec{Domain: DomainSpec{Devices: Devices{AutoattachPodInterface: ptr(false)}}},
			check: func(t *testing.T, s *VirtualMachineInstanceSpec) {
				if len(s.Networks) != 0 || len(s.Domain.Devices.Interfaces) != 0 {
					t.Errorf("networks %+v interfaces %+v", s.Networks, s.Domain.Devices.Interfaces)
				}
			},
		},
		{
			name: "bridge kept, ports get TCP, efi gets secure boot",
			in: VirtualMachineInstanceSpec{
				Domain: DomainSpec{
					Firmware: &Firmware{UUID: "5d307ca9-b3ef-428c-8861-06e72d69f223", Bootloader: &Bootloader{EFI: &EFI{}}},
					Devices: Devices{Interfaces: []Interface{
						{Name: "a", Bridge: &InterfaceBridge{}},
						{Name: "b", Ports: []Port{{Port: 80}}},
					}},
				},
			},
			check: func(t *testing.T, s *VirtualMachineInstanceSpec) {
				ifs := s.Domain.Devices.Interfaces
				if ifs[0].Bridge == nil || ifs[0].Masquerade != nil {
					t.Errorf("a %+v", ifs[0])
				}
				if ifs[1].Masquerade == nil || ifs[1].Ports[0].Protocol != "TCP" {
					t.Errorf("b %+v", ifs[1])
				}
				if len(s.Networks) != 0 {
					t.Errorf("networks added: %+v", s.Networks)
				}
				if !*s.Domain.Firmware.Bootloader.EFI.SecureBoot {
					t.Error("secure boot not defaulted on")
				}
				if s.Domain.Firmware.UUID != "5d307ca9-b3ef-428c-8861-06e72d69f223" {
					t.Errorf("uuid overwritten: %q", s.Domain.Firmware.UUID)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmi := &VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "ns"}, Spec: *tt.in.DeepCopy()}
			SetVirtualMachineInstanceDefaults(vmi)
			tt.check(t, &vmi.Spec)
			again := vmi.DeepCopy()
			SetVirtualMachineInstanceDefaults(again)
			if !equality.Semantic.DeepEqual(vmi, again) {
				t.Error("defaulting twice changed the VMI")
			}
		})
	}
}

func TestSetVirtualMachineDefaults(t *testing.T) {
	tests := []struct {
		name    string
		running *bool
		rs      *VirtualMachineRunStrategy
		want    VirtualMachineRunStrategy
	}{
		{name: "nothing means Halted", want: RunStrategyHalted},
		{name: "running true means Always", running: ptr(true), want: RunStrategyAlways},
		{name: "running false means Halted", running: ptr(false), want: RunStrategyHalted},
		{name: "runStrategy kept", rs: ptr(RunStrategyManual), want: RunStrategyManual},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vm := &VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "vm"}, Spec: VirtualMachineSpec{
				Running: tt.running, RunStrategy: tt.rs, Template: &VirtualMachineInstanceTemplateSpec{},
			}}
			SetVirtualMachineDefaults(vm)
			if *vm.Spec.RunStrategy != tt.want || vm.Spec.Running != nil {
				t.Errorf("runStrategy %q running %v", *vm.Spec.RunStrategy, vm.Spec.Running)
			}
			if vm.Spec.Template.Spec.Domain.Firmware.UUID != DeriveFirmwareUUID("", "vm") {
				t.Error("template not defaulted with the VM's name")
			}
		})
	}
}

func TestDefaultPullPolicy(t *testing.T) {
	for image, want := range map[string]corev1.PullPolicy{
		"fedora":                       corev1.PullAlways,
		"quay.io/c/fedora:latest":      corev1.PullAlways,
		"localhost:5000/fedora":        corev1.PullAlways,
		"localhost:5000/fedora:40":     corev1.PullIfNotPresent,
		"quay.io/c/fedora@sha256:abcd": corev1.PullIfNotPresent,
		"registry.example/os:1.0":      corev1.PullIfNotPresent,
	} {
		if got := DefaultPullPolicy(image); got != want {
			t.Errorf("%s: %s, want %s", image, got, want)
		}
	}
}
