package instancetype

import (
	"slices"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	itv1beta1 "github.com/kemu-dev/kemu/api/instancetype/v1beta1"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/api/validation"
)

func ptr[T any](v T) *T { return &v }

func q(s string) *resource.Quantity { v := resource.MustParse(s); return &v }

func it(cpus uint32, mem string) *itv1beta1.VirtualMachineInstancetypeSpec {
	return &itv1beta1.VirtualMachineInstancetypeSpec{
		CPU:    itv1beta1.CPUInstancetype{Guest: cpus},
		Memory: itv1beta1.MemoryInstancetype{Guest: resource.MustParse(mem)},
	}
}

func topo(t itv1beta1.PreferredCPUTopology) *itv1beta1.VirtualMachinePreferenceSpec {
	return &itv1beta1.VirtualMachinePreferenceSpec{CPU: &itv1beta1.CPUPreferences{PreferredCPUTopology: &t}}
}

func spread(across itv1beta1.SpreadAcross, ratio uint32) *itv1beta1.VirtualMachinePreferenceSpec {
	p := topo(itv1beta1.Spread)
	p.CPU.SpreadOptions = &itv1beta1.SpreadOptions{Across: &across, Ratio: &ratio}
	return p
}

func vmiSpec() v1.VirtualMachineInstanceSpec {
	return v1.VirtualMachineInstanceSpec{
		Volumes: []v1.Volume{{Name: "root", ContainerDisk: &v1.ContainerDiskSource{Image: "example/os:1"}}},
	}
}

func paths(errs field.ErrorList) []string {
	var out []string
	for _, e := range errs {
		out = append(out, e.Field)
	}
	sort.Strings(out)
	return out
}

func TestTopology(t *testing.T) {
	for _, tt := range []struct {
		name                    string
		vCPUs                   uint32
		pref                    *itv1beta1.VirtualMachinePreferenceSpec
		sockets, cores, threads uint32
	}{
		{"default is sockets", 4, nil, 4, 1, 1},
		{"one vCPU", 1, topo(itv1beta1.Cores), 1, 1, 1},
		{"cores", 4, topo(itv1beta1.Cores), 1, 4, 1},
		{"deprecated preferThreads", 4, topo(itv1beta1.DeprecatedPreferThreads), 1, 1, 4},
		{"any is sockets", 3, topo(itv1beta1.Any), 3, 1, 1},
		{"spread, default ratio 2 across sockets and cores", 8, topo(itv1beta1.Spread), 4, 2, 1},
		{"spread across cores and threads", 8, spread(itv1beta1.SpreadAcrossCoresThreads, 2), 1, 4, 2},
		{"spread across sockets, cores and threads", 8, spread(itv1beta1.SpreadAcrossSocketsCoresThreads, 2), 2, 2, 2},
		{"preferSpreadSocketToCoreRatio", 12, &itv1beta1.VirtualMachinePreferenceSpec{CPU: topo(itv1beta1.Spread).CPU, PreferSpreadSocketToCoreRatio: 3}, 4, 3, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, c, th := Topology(tt.vCPUs, tt.pref)
			if s != tt.sockets || c != tt.cores || th != tt.threads {
				t.Errorf("got %d/%d/%d, want %d/%d/%d", s, c, th, tt.sockets, tt.cores, tt.threads)
			}
		})
	}
}

// Conflicts name the VM's field; nothing is applied then.
func TestConflicts(t *testing.T) {
	for _, tt := range []struct {
		name  string
		it    *itv1beta1.VirtualMachineInstancetypeSpec
		pref  *itv1beta1.VirtualMachinePreferenceSpec
		edit  func(*v1.VirtualMachineInstanceSpec, *metav1.ObjectMeta)
		paths []string
	}{
		{"none", it(2, "1Gi"), nil, func(*v1.VirtualMachineInstanceSpec, *metav1.ObjectMeta) {}, nil},
		{"topology", it(2, "1Gi"), nil, func(s *v1.VirtualMachineInstanceSpec, _ *metav1.ObjectMeta) {
			s.Domain.CPU = &v1.CPU{Sockets: 1, Cores: 2, Threads: 1}
		}, []string{"spec.template.spec.domain.cpu.cores", "spec.template.spec.domain.cpu.sockets", "spec.template.spec.domain.cpu.threads"}},
		{"cpu resources", it(2, "1Gi"), nil, func(s *v1.VirtualMachineInstanceSpec, _ *metav1.ObjectMeta) {
			s.Domain.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
			s.Domain.Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}
		}, []string{"spec.template.spec.domain.resources.limits.cpu", "spec.template.spec.domain.resources.requests.cpu"}},
		{"model only when the instance type sets one", func() *itv1beta1.VirtualMachineInstancetypeSpec {
			s := it(1, "1Gi")
			s.CPU.Model = ptr("Skylake-Server")
			return s
		}(), nil, func(s *v1.VirtualMachineInstanceSpec, _ *metav1.ObjectMeta) {
			s.Domain.CPU = &v1.CPU{Model: "host-passthrough"}
		}, []string{"spec.template.spec.domain.cpu.model"}},
		{"the VM's model stays when the instance type has none", it(1, "1Gi"), nil, func(s *v1.VirtualMachineInstanceSpec, _ *metav1.ObjectMeta) {
			s.Domain.CPU = &v1.CPU{Model: "host-passthrough"}
		}, nil},
		{"memory: the first conflict only", it(1, "1Gi"), nil, func(s *v1.VirtualMachineInstanceSpec, _ *metav1.ObjectMeta) {
			s.Domain.Memory = &v1.Memory{Guest: q("1Gi")}
			s.Domain.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}
		}, []string{"spec.template.spec.domain.memory.guest"}},
		{"memory request", it(1, "1Gi"), nil, func(s *v1.VirtualMachineInstanceSpec, _ *metav1.ObjectMeta) {
			s.Domain.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}
		}, []string{"spec.template.spec.domain.resources.requests.memory"}},
		{"memory limit", it(1, "1Gi"), nil, func(s *v1.VirtualMachineInstanceSpec, _ *metav1.ObjectMeta) {
			s.Domain.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}
		}, []string{"spec.template.spec.domain.resources.limits.memory"}},
		{"node selector", func() *itv1beta1.VirtualMachineInstancetypeSpec {
			s := it(1, "1Gi")
			s.NodeSelector = map[string]string{"disk": "ssd"}
			return s
		}(), nil, func(s *v1.VirtualMachineInstanceSpec, _ *metav1.ObjectMeta) {
			s.NodeSelector = map[string]string{"zone": "a"}
		}, []string{"spec.template.spec.nodeSelector"}},
		{"an annotation with another value", func() *itv1beta1.VirtualMachineInstancetypeSpec {
			s := it(1, "1Gi")
			s.Annotations = map[string]string{"a": "1", "b": "2"}
			return s
		}(), nil, func(_ *v1.VirtualMachineInstanceSpec, m *metav1.ObjectMeta) {
			m.Annotations = map[string]string{"a": "1", "b": "3"}
		}, []string{"spec.template.metadata.annotations[b]"}},
		{"requirements the instance type does not meet", it(1, "1Gi"), &itv1beta1.VirtualMachinePreferenceSpec{
			Requirements: &itv1beta1.PreferenceRequirements{
				CPU:    &itv1beta1.CPUPreferenceRequirement{Guest: 2},
				Memory: &itv1beta1.MemoryPreferenceRequirement{Guest: resource.MustParse("2Gi")},
			}}, func(*v1.VirtualMachineInstanceSpec, *metav1.ObjectMeta) {}, []string{"spec.instancetype", "spec.instancetype"}},
		{"requirements the VM does not meet without an instance type", nil, func() *itv1beta1.VirtualMachinePreferenceSpec {
			p := topo(itv1beta1.Cores)
			p.Requirements = &itv1beta1.PreferenceRequirements{
				CPU:    &itv1beta1.CPUPreferenceRequirement{Guest: 2},
				Memory: &itv1beta1.MemoryPreferenceRequirement{Guest: resource.MustParse("2Gi")},
			}
			return p
		}(), func(s *v1.VirtualMachineInstanceSpec, _ *metav1.ObjectMeta) {
			s.Domain.CPU = &v1.CPU{Sockets: 2, Cores: 1}
			s.Domain.Memory = &v1.Memory{Guest: q("1Gi")}
		}, []string{"spec.template.spec.domain.cpu.cores", "spec.template.spec.domain.memory"}},
		{"a spread the vCPUs do not divide into", it(3, "1Gi"), topo(itv1beta1.Spread), func(*v1.VirtualMachineInstanceSpec, *metav1.ObjectMeta) {},
			[]string{"instancetype.spec.cpu.guest"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			spec := vmiSpec()
			var meta metav1.ObjectMeta
			tt.edit(&spec, &meta)
			before := spec.DeepCopy()
			errs := Apply(tt.it, tt.pref, &spec, &meta)
			if got := paths(errs); !slices.Equal(got, tt.paths) {
				t.Fatalf("conflicts %q, want %q (%v)", got, tt.paths, errs)
			}
			for _, e := range errs {
				if e.Type == field.ErrorTypeForbidden && e.Detail != ConflictDetail {
					t.Errorf("detail %q", e.Detail)
				}
			}
			if len(errs) > 0 && !equality.Semantic.DeepEqual(before.Domain.CPU, spec.Domain.CPU) {
				t.Errorf("the CPU changed despite the conflicts")
			}
		})
	}
}

// What an instance type and a preference make of a bare template, and
// that the result is a valid VMI once defaulted.
func TestExpand(t *testing.T) {
	full := it(4, "4Gi")
	full.CPU.Model = ptr("host-passthrough")
	full.Memory.OvercommitPercent = 50
	full.NodeSelector = map[string]string{"disk": "ssd"}
	full.Annotations = map[string]string{"from": "instancetype"}
	pref := topo(itv1beta1.Cores)
	pref.Devices = &itv1beta1.DevicePreferences{
		PreferredDiskBus: v1.DiskBusSATA, PreferredCdromBus: v1.DiskBusSCSI, PreferredInterfaceModel: "e1000e",
		PreferredRng: &v1.Rng{}, PreferredAutoattachMemBalloon: ptr(false), PreferredAutoattachGraphicsDevice: ptr(false),
		PreferredNetworkInterfaceMultiQueue: ptr(true), PreferredInterfaceMasquerade: &v1.InterfaceMasquerade{},
	}
	pref.Features = &itv1beta1.FeaturePreferences{PreferredAcpi: &v1.FeatureState{Enabled: ptr(false)}}
	pref.Firmware = &itv1beta1.FirmwarePreferences{PreferredEfi: &v1.EFI{SecureBoot: ptr(false)}}
	pref.Machine = &itv1beta1.MachinePreferences{PreferredMachineType: "pc-q35-7.2"}
	pref.PreferredTerminationGracePeriodSeconds = ptr(int64(600))
	pref.Annotations = map[string]string{"from": "preference", "os": "linux"}

	spec := vmiSpec()
	spec.Volumes = append(spec.Volumes, v1.Volume{Name: "iso", ContainerDisk: &v1.ContainerDiskSource{Image: "example/iso:1"}},
		v1.Volume{Name: "data", EmptyDisk: &v1.EmptyDiskSource{Capacity: resource.MustParse("1Gi")}})
	spec.Domain.Devices.Disks = []v1.Disk{
		{Name: "iso", CDRom: &v1.CDRomTarget{}},
		{Name: "data", Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}},
	}
	meta := metav1.ObjectMeta{Name: "vm", Namespace: "ns"}
	if errs := Apply(full, pref, &spec, &meta); len(errs) > 0 {
		t.Fatal(errs)
	}
	d := spec.Domain
	if c := d.CPU; c.Sockets != 1 || c.Cores != 4 || c.Threads != 1 || c.Model != "host-passthrough" {
		t.Errorf("cpu %+v", c)
	}
	if d.Memory.Guest.String() != "4Gi" || d.Resources.Requests.Memory().String() != "2Gi" {
		t.Errorf("memory %s, request %s", d.Memory.Guest, d.Resources.Requests.Memory())
	}
	if spec.NodeSelector["disk"] != "ssd" || meta.Annotations["from"] != "instancetype" || meta.Annotations["os"] != "linux" {
		t.Errorf("node selector %v, annotations %v", spec.NodeSelector, meta.Annotations)
	}
	buses := map[string]v1.DiskBus{}
	for _, disk := range d.Devices.Disks {
		switch {
		case disk.Disk != nil:
			buses[disk.Name] = disk.Disk.Bus
		case disk.CDRom != nil:
			buses[disk.Name] = disk.CDRom.Bus
		}
	}
	if want := map[string]v1.DiskBus{"root": v1.DiskBusSATA, "iso": v1.DiskBusSCSI, "data": v1.DiskBusVirtio}; !equality.Semantic.DeepEqual(buses, want) {
		t.Errorf("buses %v, want %v (the VM's own bus stays)", buses, want)
	}
	if len(d.Devices.Interfaces) != 1 || d.Devices.Interfaces[0].Model != "e1000e" || d.Devices.Interfaces[0].Masquerade == nil {
		t.Errorf("interfaces %+v", d.Devices.Interfaces)
	}
	if d.Devices.Rng == nil || *d.Devices.AutoattachMemBalloon || *d.Devices.AutoattachGraphicsDevice || !*d.Devices.NetworkInterfaceMultiqueue {
		t.Errorf("devices %+v", d.Devices)
	}
	if *d.Features.ACPI.Enabled || d.Firmware.Bootloader.EFI == nil || *d.Firmware.Bootloader.EFI.SecureBoot || d.Machine.Type != "pc-q35-7.2" {
		t.Errorf("features %+v firmware %+v machine %+v", d.Features, d.Firmware.Bootloader, d.Machine)
	}
	if *spec.TerminationGracePeriodSeconds != 600 {
		t.Errorf("grace %d", *spec.TerminationGracePeriodSeconds)
	}
	vmi := &v1.VirtualMachineInstance{ObjectMeta: meta, Spec: spec}
	v1.SetVirtualMachineInstanceDefaults(vmi)
	if errs := validation.ValidateVirtualMachineInstance(vmi); len(errs) > 0 {
		t.Errorf("expanded VMI is invalid: %v", errs)
	}
}

// A preference never overrides what the VM sets.
func TestPreferenceFillsOnlyUnset(t *testing.T) {
	pref := &itv1beta1.VirtualMachinePreferenceSpec{
		Devices:                                &itv1beta1.DevicePreferences{PreferredAutoattachSerialConsole: ptr(false), PreferredInterfaceModel: "e1000"},
		Features:                               &itv1beta1.FeaturePreferences{PreferredAcpi: &v1.FeatureState{Enabled: ptr(false)}},
		Firmware:                               &itv1beta1.FirmwarePreferences{PreferredUseEfi: ptr(true), PreferredUseSecureBoot: ptr(false)},
		Machine:                                &itv1beta1.MachinePreferences{PreferredMachineType: "pc"},
		PreferredTerminationGracePeriodSeconds: ptr(int64(1)),
		Annotations:                            map[string]string{"a": "pref"},
	}
	spec := vmiSpec()
	spec.Domain.Devices.AutoattachSerialConsole = ptr(true)
	spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "default", Model: "virtio", Bridge: &v1.InterfaceBridge{}}}
	spec.Networks = []v1.Network{{Name: "default", Pod: &v1.PodNetwork{}}}
	spec.Domain.Features = &v1.Features{ACPI: v1.FeatureState{Enabled: ptr(true)}}
	spec.Domain.Firmware = &v1.Firmware{Bootloader: &v1.Bootloader{BIOS: &v1.BIOS{}}}
	spec.Domain.Machine = &v1.Machine{Type: "q35"}
	spec.TerminationGracePeriodSeconds = ptr(int64(30))
	meta := metav1.ObjectMeta{Annotations: map[string]string{"a": "vm"}}
	want := spec.DeepCopy()
	if errs := Apply(nil, pref, &spec, &meta); len(errs) > 0 {
		t.Fatal(errs)
	}
	want.Domain.Devices.Disks = []v1.Disk{{Name: "root", Disk: &v1.DiskTarget{}}}
	if !equality.Semantic.DeepEqual(&spec, want) {
		t.Errorf("the VM's settings changed:\n got %+v\nwant %+v", spec.Domain, want.Domain)
	}
	if meta.Annotations["a"] != "vm" {
		t.Errorf("annotation %q", meta.Annotations["a"])
	}
}

// The deprecated preferredUseEfi and preferredUseSecureBoot, and BIOS.
func TestFirmwarePreferences(t *testing.T) {
	for _, tt := range []struct {
		name   string
		fw     itv1beta1.FirmwarePreferences
		bios   bool
		efi    bool
		secure *bool
	}{
		{"bios", itv1beta1.FirmwarePreferences{PreferredUseBios: ptr(true)}, true, false, nil},
		{"efi with secure boot off", itv1beta1.FirmwarePreferences{PreferredUseEfi: ptr(true), PreferredUseSecureBoot: ptr(false)}, false, true, ptr(false)},
		{"preferredEfi wins over the deprecated fields", itv1beta1.FirmwarePreferences{PreferredEfi: &v1.EFI{}, PreferredUseSecureBoot: ptr(false)}, false, true, nil},
		{"nothing", itv1beta1.FirmwarePreferences{PreferredUseEfi: ptr(false)}, false, false, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			spec := vmiSpec()
			if errs := Apply(nil, &itv1beta1.VirtualMachinePreferenceSpec{Firmware: &tt.fw}, &spec, &metav1.ObjectMeta{}); len(errs) > 0 {
				t.Fatal(errs)
			}
			var bl v1.Bootloader
			if fw := spec.Domain.Firmware; fw != nil && fw.Bootloader != nil {
				bl = *fw.Bootloader
			}
			if (bl.BIOS != nil) != tt.bios || (bl.EFI != nil) != tt.efi {
				t.Fatalf("bootloader %+v", bl)
			}
			if bl.EFI != nil && !equality.Semantic.DeepEqual(bl.EFI.SecureBoot, tt.secure) {
				t.Errorf("secureBoot %v, want %v", bl.EFI.SecureBoot, tt.secure)
			}
		})
	}
}
