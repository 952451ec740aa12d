package validation

import (
	"slices"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

func ptr[T any](v T) *T { return &v }

// baseVMI is a small valid VMI: a containerDisk, cloud-init, the pod network.
func baseVMI() *v1.VirtualMachineInstance {
	guest := resource.MustParse("128Mi")
	return &v1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "ns"},
		Spec: v1.VirtualMachineInstanceSpec{
			Domain: v1.DomainSpec{
				Memory: &v1.Memory{Guest: &guest},
				Devices: v1.Devices{
					Disks: []v1.Disk{{Name: "root", Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}},
				},
			},
			Volumes: []v1.Volume{
				{Name: "root", ContainerDisk: &v1.ContainerDiskSource{Image: "example/os:1"}},
				{Name: "ci", CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserData: "#cloud-config\n"}},
			},
		},
	}
}

func errorKeys(errs field.ErrorList) []string {
	keys := make([]string, 0, len(errs))
	for _, e := range errs {
		keys = append(keys, e.Type.String()+" "+e.Field)
	}
	sort.Strings(keys)
	return keys
}

func TestValidateVirtualMachineInstance(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*v1.VirtualMachineInstance)
		want   []string // "<error type> <field path>", sorted
	}{
		{name: "valid", mutate: func(*v1.VirtualMachineInstance) {}},
		{
			name: "disk without a volume",
			mutate: func(vmi *v1.VirtualMachineInstance) {
				vmi.Spec.Domain.Devices.Disks = append(vmi.Spec.Domain.Devices.Disks, v1.Disk{Name: "orphan"})
			},
			want: []string{"Invalid value spec.domain.devices.disks[1].name"},
		},
		{
			name: "two sources in one volume",
			mutate: func(vmi *v1.VirtualMachineInstance) {
				vmi.Spec.Volumes[0].EmptyDisk = &v1.EmptyDiskSource{Capacity: resource.MustParse("1Gi")}
			},
			want: []string{"Invalid value spec.volumes[0]"},
		},
		{
			name: "volume without a source",
			mutate: func(vmi *v1.VirtualMachineInstance) {
				vmi.Spec.Volumes = append(vmi.Spec.Volumes, v1.Volume{Name: "empty"})
			},
			want: []string{"Required value spec.volumes[2]"},
		},
		{
			name: "memory below 32Mi",
			mutate: func(vmi *v1.VirtualMachineInstance) {
				q := resource.MustParse("16Mi")
				vmi.Spec.Domain.Memory.Guest = &q
			},
			want: []string{"Invalid value spec.domain.memory.guest"},
		},
		{
			name: "no memory at all",
			mutate: func(vmi *v1.VirtualMachineInstance) {
				vmi.Spec.Domain.Memory = nil
			},
			want: []string{"Required value spec.domain.memory.guest"},
		},
		{
			name: "guest memory above the limit",
			mutate: func(vmi *v1.VirtualMachineInstance) {
				vmi.Spec.Domain.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}
			},
			want: []string{"Invalid value spec.domain.memory.guest", "Invalid value spec.domain.resources.requests.memory"},
		},
		{
			name: "interface without a network",
			mutate: func(vmi *v1.VirtualMachineInstance) {
				vmi.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "nic", Masquerade: &v1.InterfaceMasquerade{}}}
			},
			want: []string{"Invalid value spec.domain.devices.interfaces[0].name"},
		},
		{
			name: "network without an interface",
			mutate: func(vmi *v1.VirtualMachineInstance) {
				vmi.Spec.Domain.Devices.AutoattachPodInterface = ptr(false)
				vmi.Spec.Networks = []v1.Network{{Name: "default", Pod: &v1.PodNetwork{}}}
			},
			want: []string{"Invalid value spec.networks[0].name"},
		},
		{
			name: "sata on an i440fx machine",
			mutate: func(vmi *v1.VirtualMachineInstance) {
				vmi.Spec.Domain.Machine = &v1.Machine{Type: "pc-i440fx-7.2"}
				vmi.Spec.Domain.Devices.Disks[0].Disk.Bus = v1.DiskBusSATA
			},
			want: []string{"Invalid value spec.domain.devices.disks[0].disk.bus"},
		},
		{
			name: "virtio cdrom",
			mutate: func(vmi *v1.VirtualMachineInstance) {
				vmi.Spec.Domain.Devices.Disks[0] = v1.Disk{Name: "root", CDRom: &v1.CDRomTarget{Bus: v1.DiskBusVirtio}}
			},
			want: []string{"Unsupported value spec.domain.devices.disks[0].cdrom.bus"},
		},
		{
			// KubeVirt accepts it; QEMU's CD devices are read-only media.
			name: "writable cdrom",
			mutate: func(vmi *v1.VirtualMachineInstance) {
				vmi.Spec.Domain.Devices.Disks[0] = v1.Disk{Name: "root", CDRom: &v1.CDRomTarget{ReadOnly: ptr(false)}}
			},
		},
		{
			name: "smm on",
			mutate: func(vmi *v1.VirtualMachineInstance) {
				vmi.Spec.Domain.Features = &v1.Features{SMM: &v1.FeatureState{Enabled: ptr(true)}}
			},
		},
		{
			name: "smm off with BIOS",
			mutate: func(vmi *v1.VirtualMachineInstance) {
				vmi.Spec.Domain.Features = &v1.Features{SMM: &v1.FeatureState{Enabled: ptr(false)}}
			},
		},
		{
			name: "smm off with EFI without Secure Boot",
			mutate: func(vmi *v1.VirtualMachineInstance) {
				vmi.Spec.Domain.Features = &v1.Features{SMM: &v1.FeatureState{Enabled: ptr(false)}}
				vmi.Spec.Domain.Firmware = &v1.Firmware{Bootloader: &v1.Bootloader{EFI: &v1.EFI{SecureBoot: ptr(false)}}}
			},
		},
		{
			name: "smm off with Secure Boot",
			mutate: func(vmi *v1.VirtualMachineInstance) {
				vmi.Spec.Domain.Features = &v1.Features{SMM: &v1.FeatureState{Enabled: ptr(false)}}
				vmi.Spec.Domain.Firmware = &v1.Firmware{Bootloader: &v1.Bootloader{EFI: &v1.EFI{SecureBoot: ptr(true)}}}
			},
			want: []string{"Invalid value spec.domain.features.smm.enabled"},
		},
		{
			name: "smm off with Secure Boot by default (secureBoot unset)",
			mutate: func(vmi *v1.VirtualMachineInstance) {
				vmi.Spec.Domain.Features = &v1.Features{SMM: &v1.FeatureState{Enabled: ptr(false)}}
				vmi.Spec.Domain.Firmware = &v1.Firmware{Bootloader: &v1.Bootloader{EFI: &v1.EFI{}}}
			},
			want: []string{"Invalid value spec.domain.features.smm.enabled"},
		},
		{
			name: "unknown bus",
			mutate: func(vmi *v1.VirtualMachineInstance) {
				vmi.Spec.Domain.Devices.Disks[0].Disk.Bus = "ide"
			},
			want: []string{"Unsupported value spec.domain.devices.disks[0].disk.bus"},
		},
		{
			name: "unknown machine type",
			mutate: func(vmi *v1.VirtualMachineInstance) {
				vmi.Spec.Domain.Machine = &v1.Machine{Type: "virt"}
			},
			want: []string{"Unsupported value spec.domain.machine.type"},
		},
		{
			name: "duplicate boot order and bad serial",
			mutate: func(vmi *v1.VirtualMachineInstance) {
				d := &vmi.Spec.Domain.Devices
				d.Disks[0].BootOrder = ptr(uint(1))
				d.Disks = append(d.Disks, v1.Disk{Name: "ci", BootOrder: ptr(uint(1)), Serial: "has space"})
			},
			want: []string{"Invalid value spec.domain.devices.disks[1].bootOrder", "Invalid value spec.domain.devices.disks[1].serial"},
		},
		{
			name: "bios and efi",
			mutate: func(vmi *v1.VirtualMachineInstance) {
				vmi.Spec.Domain.Firmware = &v1.Firmware{Bootloader: &v1.Bootloader{BIOS: &v1.BIOS{}, EFI: &v1.EFI{}}}
			},
			want: []string{"Invalid value spec.domain.firmware.bootloader"},
		},
		{
			name: "bad firmware uuid",
			mutate: func(vmi *v1.VirtualMachineInstance) {
				vmi.Spec.Domain.Firmware = &v1.Firmware{UUID: "not-a-uuid"}
			},
			want: []string{"Invalid value spec.domain.firmware.uuid"},
		},
		{
			name: "kernel args without a kernel",
			mutate: func(vmi *v1.VirtualMachineInstance) {
				vmi.Spec.Domain.Firmware = &v1.Firmware{KernelBoot: &v1.KernelBoot{
					KernelArgs: "console=ttyS0",
					Container:  &v1.KernelBootContainer{Image: "k:1", InitrdPath: "boot/initrd"},
				}}
			},
			want: []string{"Invalid value spec.domain.firmware.kernelBoot.container.initrdPath", "Required value spec.domain.firmware.kernelBoot.container.kernelPath"},
		},
		{
			name: "hostDisk DiskOrCreate without capacity, relative path",
			mutate: func(vmi *v1.VirtualMachineInstance) {
				vmi.Spec.Volumes[0] = v1.Volume{Name: "root", HostDisk: &v1.HostDisk{Path: "disk.img", Type: v1.HostDiskExistsOrCreate}}
			},
			want: []string{"Invalid value spec.volumes[0].hostDisk.path", "Required value spec.volumes[0].hostDisk.capacity"},
		},
		{
			name: "emptyDisk of zero size",
			mutate: func(vmi *v1.VirtualMachineInstance) {
				vmi.Spec.Volumes[0] = v1.Volume{Name: "root", EmptyDisk: &v1.EmptyDiskSource{}}
			},
			want: []string{"Invalid value spec.volumes[0].emptyDisk.capacity"},
		},
		{
			name: "cloud-init: bad base64 and two user-data sources",
			mutate: func(vmi *v1.VirtualMachineInstance) {
				vmi.Spec.Volumes[1].CloudInitNoCloud.UserDataBase64 = "%%%"
			},
			want: []string{"Invalid value spec.volumes[1].cloudInitNoCloud", "Invalid value spec.volumes[1].cloudInitNoCloud.userDataBase64"},
		},
		{
			name: "ports with bridge, bad MAC, bad model",
			mutate: func(vmi *v1.VirtualMachineInstance) {
				vmi.Spec.Networks = []v1.Network{{Name: "default", Pod: &v1.PodNetwork{}}}
				vmi.Spec.Domain.Devices.Interfaces = []v1.Interface{{
					Name: "default", Bridge: &v1.InterfaceBridge{}, Model: "vmxnet3",
					MacAddress: "01:00:5e:00:00:01", Ports: []v1.Port{{Port: 22}},
				}}
			},
			want: []string{
				"Invalid value spec.domain.devices.interfaces[0].macAddress",
				"Invalid value spec.domain.devices.interfaces[0].ports",
				"Unsupported value spec.domain.devices.interfaces[0].model",
			},
		},
		{
			name: "bad vmNetworkCIDR",
			mutate: func(vmi *v1.VirtualMachineInstance) {
				vmi.Spec.Networks = []v1.Network{{Name: "default", Pod: &v1.PodNetwork{VMNetworkCIDR: "10.0.2.0/31"}}}
				vmi.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "default"}}
			},
			want: []string{"Invalid value spec.networks[0].pod.vmNetworkCIDR"},
		},
		{
			name: "unsupported KubeVirt fields",
			mutate: func(vmi *v1.VirtualMachineInstance) {
				raw := v1.UnsupportedList{{RawJSON: v1.RawJSON{Raw: []byte(`{"name":"g"}`)}}}
				vmi.Spec.Domain.Devices.GPUs = raw
				vmi.Spec.Domain.Devices.HostDevices = raw
				vmi.Spec.Domain.Devices.AutoattachVSOCK = &v1.UnsupportedBool{RawJSON: v1.RawJSON{Raw: []byte(`true`)}}
				vmi.Spec.Architecture = &v1.UnsupportedScalar{RawJSON: v1.RawJSON{Raw: []byte(`"arm64"`)}}
				vmi.Spec.Networks = []v1.Network{{Name: "default", Pod: &v1.PodNetwork{}}}
				vmi.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "default", SRIOV: &v1.Unsupported{RawJSON: v1.RawJSON{Raw: []byte(`{}`)}}}}
				vmi.Spec.Volumes[0] = v1.Volume{Name: "root", DataVolume: &v1.DataVolumeSource{Name: "dv",
					Hotpluggable: &v1.UnsupportedBool{RawJSON: v1.RawJSON{Raw: []byte(`true`)}}}}
			},
			want: []string{
				"Forbidden spec.domain.devices.autoattachVSOCK",
				"Forbidden spec.domain.devices.gpus",
				"Forbidden spec.domain.devices.hostDevices",
				"Forbidden spec.architecture",
				"Forbidden spec.domain.devices.interfaces[0].sriov",
				"Forbidden spec.volumes[0].dataVolume.hotpluggable",
			},
		},
		{
			name: "dataVolume: the PVC's name rules",
			mutate: func(vmi *v1.VirtualMachineInstance) {
				vmi.Spec.Volumes[0] = v1.Volume{Name: "root", DataVolume: &v1.DataVolumeSource{Name: "Bad_Name"}}
				vmi.Spec.Volumes = append(vmi.Spec.Volumes, v1.Volume{Name: "data", DataVolume: &v1.DataVolumeSource{}})
			},
			want: []string{"Invalid value spec.volumes[0].dataVolume.name", "Required value spec.volumes[2].dataVolume.name"},
		},
		{
			name: "dataVolume is a volume's one source",
			mutate: func(vmi *v1.VirtualMachineInstance) {
				vmi.Spec.Volumes[0].DataVolume = &v1.DataVolumeSource{Name: "dv"}
			},
			want: []string{"Invalid value spec.volumes[0]"},
		},
		{
			name: "bad names",
			mutate: func(vmi *v1.VirtualMachineInstance) {
				vmi.Spec.Volumes[0].Name = "Root_Disk"
				vmi.Spec.Domain.Devices.Disks[0].Name = "Root_Disk"
			},
			want: []string{"Invalid value spec.domain.devices.disks[0].name", "Invalid value spec.volumes[0].name"},
		},
		{
			name: "negative grace period and bad start strategy",
			mutate: func(vmi *v1.VirtualMachineInstance) {
				vmi.Spec.TerminationGracePeriodSeconds = ptr(int64(-1))
				vmi.Spec.StartStrategy = ptr(v1.StartStrategy("Running"))
			},
			want: []string{"Invalid value spec.terminationGracePeriodSeconds", "Unsupported value spec.startStrategy"},
		},
	}
	tests = append(tests, qemuRefusals...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmi := baseVMI()
			tt.mutate(vmi)
			v1.SetVirtualMachineInstanceDefaults(vmi)
			errs := ValidateVirtualMachineInstance(vmi)
			got := errorKeys(errs)
			want := slices.Clone(tt.want)
			sort.Strings(want)
			if !slices.Equal(got, want) {
				t.Errorf("errors:\n got  %q\n want %q\nfull: %v", got, want, errs)
			}
			for _, e := range errs {
				if e.Type == field.ErrorTypeForbidden && e.Detail != UnsupportedDetail {
					t.Errorf("forbidden error %q does not say it is unsupported", e)
				}
			}
		})
	}
}

func TestValidateVirtualMachine(t *testing.T) {
	tests := []struct {
		name string
		vm   v1.VirtualMachineSpec
		want []string
	}{
		{name: "valid", vm: v1.VirtualMachineSpec{RunStrategy: ptr(v1.RunStrategyAlways), Template: &v1.VirtualMachineInstanceTemplateSpec{Spec: baseVMI().Spec}}},
		{name: "running converts", vm: v1.VirtualMachineSpec{Running: ptr(true), Template: &v1.VirtualMachineInstanceTemplateSpec{Spec: baseVMI().Spec}}},
		{name: "no template", vm: v1.VirtualMachineSpec{}, want: []string{"Required value spec.template"}},
		{
			name: "running and runStrategy",
			vm:   v1.VirtualMachineSpec{Running: ptr(true), RunStrategy: ptr(v1.RunStrategyHalted), Template: &v1.VirtualMachineInstanceTemplateSpec{Spec: baseVMI().Spec}},
			want: []string{"Invalid value spec.running"},
		},
		{
			name: "bad run strategy and template errors have template paths",
			vm: v1.VirtualMachineSpec{RunStrategy: ptr(v1.VirtualMachineRunStrategy("Sometimes")), Template: &v1.VirtualMachineInstanceTemplateSpec{Spec: func() v1.VirtualMachineInstanceSpec {
				s := baseVMI().Spec
				s.Domain.Devices.GPUs = v1.UnsupportedList{}
				s.Volumes = s.Volumes[:1]
				s.Domain.Devices.Disks = append(s.Domain.Devices.Disks, v1.Disk{Name: "ci"})
				return s
			}()}},
			want: []string{
				"Forbidden spec.template.spec.domain.devices.gpus",
				"Invalid value spec.template.spec.domain.devices.disks[1].name",
				"Unsupported value spec.runStrategy",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vm := &v1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "vm"}, Spec: tt.vm}
			v1.SetVirtualMachineDefaults(vm)
			got := errorKeys(ValidateVirtualMachine(vm))
			want := slices.Clone(tt.want)
			sort.Strings(want)
			if !slices.Equal(got, want) {
				t.Errorf("errors:\n got  %q\n want %q", got, want)
			}
		})
	}
}

func TestValidateVirtualMachineInstanceMigration(t *testing.T) {
	tests := []struct {
		name string
		spec v1.VirtualMachineInstanceMigrationSpec
		want []string
	}{
		{name: "valid", spec: v1.VirtualMachineInstanceMigrationSpec{VMIName: "vm"}},
		{name: "no vmi", want: []string{"Required value spec.vmiName"}},
		{name: "bad name", spec: v1.VirtualMachineInstanceMigrationSpec{VMIName: "Bad Name"}, want: []string{"Invalid value spec.vmiName"}},
		{
			name: "unsupported",
			spec: v1.VirtualMachineInstanceMigrationSpec{VMIName: "vm", SendTo: &v1.Unsupported{RawJSON: v1.RawJSON{Raw: []byte(`{}`)}}},
			want: []string{"Forbidden spec.sendTo"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := errorKeys(ValidateVirtualMachineInstanceMigration(&v1.VirtualMachineInstanceMigration{Spec: tt.spec}))
			if !slices.Equal(got, tt.want) {
				t.Errorf("errors:\n got  %q\n want %q", got, tt.want)
			}
		})
	}
}
