// Command instancetypes writes deploy/instancetypes/, the optional overlay
// of kubevirt/common-instancetypes' series and a few of its preferences as
// kemu's cluster-wide kinds, from the tables below (make generate runs it).
// Every object is judged by kemu's validation: a series whose instance
// types set what kemu cannot run is left out and named in the overlay's
// kustomization.yaml, never shipped without those fields.
package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	itv1beta1 "github.com/kemu-dev/kemu/api/instancetype/v1beta1"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/api/validation"
)

// size is one instance type of a series: its size name, vCPUs, memory.
type size struct {
	name string
	cpus uint32
	mem  string
}

// series is a kubevirt/common-instancetypes series (version 1) as
// instancetypes/<s>/1/ defines it.
type series struct {
	name, class, description string
	sizes                    []size
	// spec adds the series' own settings to a size's spec.
	spec func(s size, spec *itv1beta1.VirtualMachineInstancetypeSpec)
}

func raw(js string) v1.RawJSON { return v1.RawJSON{Raw: []byte(js)} }

var (
	universal = []size{{"nano", 1, "512Mi"}, {"micro", 1, "1Gi"}, {"small", 1, "2Gi"}, {"medium", 1, "4Gi"},
		{"2xmedium", 2, "4Gi"}, {"large", 2, "8Gi"}, {"xlarge", 4, "16Gi"}, {"2xlarge", 8, "32Gi"},
		{"4xlarge", 16, "64Gi"}, {"8xlarge", 32, "128Gi"}}
	seriesTable = []series{
		{"u1", "general.purpose", "General purpose: vCPUs share physical cores on a time-slice basis.", universal, nil},
		{"o1", "overcommitted", "The U series with memory overcommitted by 50 %.", withoutSize(universal, "2xmedium"),
			func(_ size, s *itv1beta1.VirtualMachineInstancetypeSpec) { s.Memory.OvercommitPercent = 50 }},
		{"cx1", "compute.exclusive", "Compute exclusive: dedicated CPUs, NUMA passthrough, hugepages.",
			[]size{{"medium", 1, "2Gi"}, {"large", 2, "4Gi"}, {"xlarge", 4, "8Gi"}, {"2xlarge", 8, "16Gi"}, {"4xlarge", 16, "32Gi"}, {"8xlarge", 32, "64Gi"}},
			func(z size, s *itv1beta1.VirtualMachineInstancetypeSpec) {
				s.CPU.DedicatedCPUPlacement = ptr(true)
				s.CPU.IsolateEmulatorThread = ptr(true)
				s.CPU.NUMA = &v1.NUMA{GuestMappingPassthrough: &v1.NUMAGuestMappingPassthrough{}}
				s.CPU.MaxSockets = &v1.UnsupportedScalar{RawJSON: raw(fmt.Sprint(z.cpus))}
				s.Memory.Hugepages = &v1.Hugepages{PageSize: "2Mi"}
				s.IOThreadsPolicy = &v1.UnsupportedScalar{RawJSON: raw(`"auto"`)}
			}},
		{"m1", "memory.intensive", "Memory intensive: hugepages.",
			[]size{{"large", 2, "16Gi"}, {"xlarge", 4, "32Gi"}, {"2xlarge", 8, "64Gi"}, {"4xlarge", 16, "128Gi"}, {"8xlarge", 32, "256Gi"}},
			func(_ size, s *itv1beta1.VirtualMachineInstancetypeSpec) {
				s.Memory.Hugepages = &v1.Hugepages{PageSize: "2Mi"}
			}},
		{"n1", "network", "Network (DPDK): dedicated CPUs, isolated emulator thread, 1Gi hugepages.",
			[]size{{"medium", 4, "4Gi"}, {"large", 4, "8Gi"}, {"xlarge", 8, "16Gi"}, {"2xlarge", 16, "32Gi"}, {"4xlarge", 32, "64Gi"}, {"8xlarge", 64, "128Gi"}},
			func(_ size, s *itv1beta1.VirtualMachineInstancetypeSpec) {
				s.CPU.DedicatedCPUPlacement = ptr(true)
				s.CPU.IsolateEmulatorThread = ptr(true)
				s.Memory.Hugepages = &v1.Hugepages{PageSize: "1Gi"}
			}},
	}
)

func withoutSize(sizes []size, name string) []size {
	var out []size
	for _, s := range sizes {
		if s.name != name {
			out = append(out, s)
		}
	}
	return out
}

// preference is one of common-instancetypes' preferences, with only the
// fields kemu supports; left lists what KubeVirt's version also sets.
type preference struct {
	name, os string
	cpus     uint32
	mem      string
	spec     func(*itv1beta1.VirtualMachinePreferenceSpec)
	left     string
}

func ptr[T any](v T) *T { return &v }

var preferenceTable = []preference{
	{"fedora", "linux", 1, "2Gi", func(p *itv1beta1.VirtualMachinePreferenceSpec) {
		linuxDevices(p)
		p.Firmware = &itv1beta1.FirmwarePreferences{PreferredEfi: &v1.EFI{SecureBoot: ptr(true)}}
	}, "features.preferredSmm (kemu's launcher enables SMM for Secure Boot itself), preferredArchitecture, requirements.architecture"},
	{"ubuntu", "linux", 1, "2Gi", linuxDevices, ""},
	{"centos.stream9", "linux", 1, "1.5Gi", linuxDevices, "devices.preferredDiskDedicatedIoThread"},
	{"rhel.9", "linux", 1, "1.5Gi", func(p *itv1beta1.VirtualMachinePreferenceSpec) {
		linuxDevices(p)
		p.Firmware = &itv1beta1.FirmwarePreferences{PreferredEfi: &v1.EFI{SecureBoot: ptr(true)}}
	}, "devices.preferredDiskDedicatedIoThread, features.preferredSmm, preferredArchitecture, requirements.architecture"},
	{"windows.11", "windows", 2, "4Gi", func(p *itv1beta1.VirtualMachinePreferenceSpec) {
		cores := itv1beta1.Cores
		p.CPU = &itv1beta1.CPUPreferences{PreferredCPUTopology: &cores}
		p.Devices = &itv1beta1.DevicePreferences{PreferredDiskBus: v1.DiskBusSATA, PreferredInterfaceModel: "e1000e"}
		p.Features = &itv1beta1.FeaturePreferences{PreferredAcpi: &v1.FeatureState{Enabled: ptr(true)}}
		p.Firmware = &itv1beta1.FirmwarePreferences{PreferredEfi: &v1.EFI{SecureBoot: ptr(true)}}
		p.PreferredTerminationGracePeriodSeconds = ptr(int64(3600))
	}, "clock, devices.preferredAutoattachInputDevice, devices.preferredTPM, features.preferredApic, preferredHyperv, preferredSmm, firmware.preferredEfi.persistent"},
}

func linuxDevices(p *itv1beta1.VirtualMachinePreferenceSpec) {
	p.Devices = &itv1beta1.DevicePreferences{PreferredDiskBus: v1.DiskBusVirtio, PreferredInterfaceModel: "virtio", PreferredRng: &v1.Rng{}}
}

const header = "# Generated by hack/instancetypes (make generate) from its tables; do not edit.\n"

func main() {
	dir := "deploy/instancetypes"
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	files, err := Generate()
	if err != nil {
		fmt.Fprintln(os.Stderr, "instancetypes:", err)
		os.Exit(1)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "instancetypes:", err)
		os.Exit(1)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "instancetypes:", err)
			os.Exit(1)
		}
	}
}

// Generate returns the overlay's files by name.
func Generate() (map[string][]byte, error) {
	var its, prefs bytes.Buffer
	its.WriteString(header)
	prefs.WriteString(header)
	var shipped, refused []string
	for _, s := range seriesTable {
		var docs [][]byte
		var why []string
		for _, z := range s.sizes {
			it := &itv1beta1.VirtualMachineClusterInstancetype{
				TypeMeta: metav1.TypeMeta{APIVersion: itv1beta1.APIVersion, Kind: itv1beta1.KindClusterInstancetype},
				ObjectMeta: metav1.ObjectMeta{Name: s.name + "." + z.name, Labels: map[string]string{
					"instancetype.kubevirt.io/class": s.class, "instancetype.kubevirt.io/cpu": fmt.Sprint(z.cpus),
					"instancetype.kubevirt.io/memory": z.mem, "instancetype.kubevirt.io/size": z.name,
					"instancetype.kubevirt.io/version": "1",
				}, Annotations: map[string]string{"instancetype.kubevirt.io/description": s.description}},
				Spec: itv1beta1.VirtualMachineInstancetypeSpec{
					CPU:    itv1beta1.CPUInstancetype{Guest: z.cpus},
					Memory: itv1beta1.MemoryInstancetype{Guest: resource.MustParse(z.mem)},
				},
			}
			if s.spec != nil {
				s.spec(z, &it.Spec)
			}
			if errs := validation.ValidateClusterInstancetype(it); len(errs) > 0 {
				for _, e := range errs {
					why = append(why, e.Field)
				}
				continue
			}
			y, err := yaml.Marshal(it)
			if err != nil {
				return nil, err
			}
			docs = append(docs, y)
		}
		if len(why) > 0 {
			refused = append(refused, fmt.Sprintf("#   %s: %s", s.name, strings.Join(uniq(why), ", ")))
			continue
		}
		shipped = append(shipped, s.name)
		for _, d := range docs {
			its.WriteString("---\n")
			its.Write(d)
		}
	}
	for _, p := range preferenceTable {
		pr := &itv1beta1.VirtualMachineClusterPreference{
			TypeMeta: metav1.TypeMeta{APIVersion: itv1beta1.APIVersion, Kind: itv1beta1.KindClusterPreference},
			ObjectMeta: metav1.ObjectMeta{Name: p.name, Labels: map[string]string{
				"instancetype.kubevirt.io/os-type": p.os, "instancetype.kubevirt.io/required-cpu": fmt.Sprint(p.cpus),
				"instancetype.kubevirt.io/required-memory": p.mem,
			}},
			Spec: itv1beta1.VirtualMachinePreferenceSpec{
				Annotations: map[string]string{"vm.kubevirt.io/os": p.os},
				Requirements: &itv1beta1.PreferenceRequirements{
					CPU:    &itv1beta1.CPUPreferenceRequirement{Guest: p.cpus},
					Memory: &itv1beta1.MemoryPreferenceRequirement{Guest: resource.MustParse(p.mem)},
				},
			},
		}
		if p.left != "" {
			pr.Annotations = map[string]string{"kemu.dev/left-out-of-kubevirts": p.left}
		}
		p.spec(&pr.Spec)
		if errs := validation.ValidateClusterPreference(pr); len(errs) > 0 {
			return nil, fmt.Errorf("preference %s: %v", p.name, errs.ToAggregate())
		}
		y, err := yaml.Marshal(pr)
		if err != nil {
			return nil, err
		}
		prefs.WriteString("---\n")
		prefs.Write(y)
	}
	k := header + `# kubectl apply -k deploy/instancetypes (docs/deploy.md): kubevirt/common-instancetypes'
# series ` + strings.Join(shipped, ", ") + ` and a few of its preferences as cluster-wide kinds.
# Series left out, for what their instance types set that kemu cannot run:
` + strings.Join(refused, "\n") + `
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
labels:
  - pairs:
      app.kubernetes.io/part-of: kemu
      app.kubernetes.io/component: instancetypes
    includeSelectors: false
resources:
  - instancetypes.yaml
  - preferences.yaml
`
	return map[string][]byte{"kustomization.yaml": []byte(k), "instancetypes.yaml": its.Bytes(), "preferences.yaml": prefs.Bytes()}, nil
}

func uniq(s []string) []string {
	sort.Strings(s)
	var out []string
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}
