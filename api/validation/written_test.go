package validation

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// Errors on fields defaulting filled in are reported where the author
// wrote the value, or at the nearest field they wrote.
func TestAsWritten(t *testing.T) {
	tests := []struct {
		name string
		vm   bool // a VirtualMachine (the spec under spec.template.spec)
		yaml string
		want []string // "<field>: <detail>" of each error, sorted
	}{
		{
			name: "guest memory from requests.memory",
			yaml: "spec:\n  domain:\n    resources: {requests: {memory: 16Mi}}\n    devices: {}\n",
			want: []string{"spec.domain.resources.requests.memory: must be at least 32Mi"},
		},
		{
			name: "guest memory from limits.memory (a VM)",
			vm:   true,
			yaml: "spec:\n  runStrategy: Always\n  template:\n    spec:\n      domain:\n        resources: {limits: {memory: 16Mi}}\n        devices: {}\n",
			want: []string{"spec.template.spec.domain.resources.limits.memory: must be at least 32Mi"},
		},
		{
			name: "guest memory written: left where it is",
			yaml: "spec:\n  domain:\n    memory: {guest: 16Mi}\n    devices: {}\n",
			want: []string{"spec.domain.memory.guest: must be at least 32Mi"},
		},
		{
			name: "guest memory missing: Required stays",
			yaml: "spec:\n  domain:\n    devices: {}\n",
			want: []string{"spec.domain.memory.guest: set memory.guest or resources.requests.memory"},
		},
		{
			name: "requests.memory from guest memory",
			yaml: "spec:\n  domain:\n    memory: {guest: 64Mi}\n    resources: {limits: {memory: -1Mi}}\n    devices: {}\n",
			want: []string{"spec.domain.memory.guest: must not exceed limits.memory (-1Mi)", "spec.domain.memory.guest: must not exceed resources.limits.memory (-1Mi)"},
		},
		{
			name: "a defaulted CD-ROM bus on a machine without SATA",
			yaml: "spec:\n  domain:\n    memory: {guest: 64Mi}\n    machine: {type: pc}\n    devices:\n      autoattachPodInterface: false\n      disks:\n      - {name: iso, cdrom: {}}\n  volumes:\n  - {name: iso, containerDisk: {image: \"x:1\"}}\n",
			want: []string{`spec.domain.devices.disks[0].cdrom: machine type "pc" has no SATA controller; use q35 (at spec.domain.devices.disks[0].cdrom.bus, which kemu's defaults set)`},
		},
		{
			name: "the defaulted pod interface named as a defaulted disk",
			yaml: "spec:\n  domain:\n    memory: {guest: 64Mi}\n    devices: {}\n  volumes:\n  - {name: default, emptyDisk: {capacity: 1Gi}}\n",
			want: []string{`spec.domain.devices: disk "default" has the same name: both would be QEMU device "ua-default"; disk and interface names must differ (at spec.domain.devices.interfaces[0].name, which kemu's defaults set)`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var written map[string]any
			if err := yaml.Unmarshal([]byte(tt.yaml), &written); err != nil {
				t.Fatal(err)
			}
			var obj any
			var errs field.ErrorList
			if tt.vm {
				vm := &v1.VirtualMachine{}
				if err := yaml.Unmarshal([]byte(tt.yaml), vm); err != nil {
					t.Fatal(err)
				}
				v1.SetVirtualMachineDefaults(vm)
				obj, errs = vm, ValidateVirtualMachine(vm)
			} else {
				vmi := &v1.VirtualMachineInstance{}
				if err := yaml.Unmarshal([]byte(tt.yaml), vmi); err != nil {
					t.Fatal(err)
				}
				v1.SetVirtualMachineInstanceDefaults(vmi)
				obj, errs = vmi, ValidateVirtualMachineInstance(vmi)
			}
			var got []string
			for _, e := range AsWritten(errs, obj, written) {
				got = append(got, e.Field+": "+e.Detail)
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("errors\n got  %q\n want %q", got, tt.want)
			}
		})
	}
}

// A disk defaulted from a volume: its errors name the volume; one the
// volume has too is said once.
func TestAsWrittenDefaultedDisk(t *testing.T) {
	vmi := &v1.VirtualMachineInstance{}
	const doc = "spec:\n  domain:\n    memory: {guest: 64Mi}\n    devices:\n      disks: [{name: root}]\n  volumes:\n  - {name: root, containerDisk: {image: \"x:1\"}}\n  - {name: scratch, emptyDisk: {capacity: 1Gi}}\n  - {name: Data_1, emptyDisk: {capacity: 1Gi}}\n"
	var written map[string]any
	if err := yaml.Unmarshal([]byte(doc), &written); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(doc), vmi); err != nil {
		t.Fatal(err)
	}
	v1.SetVirtualMachineInstanceDefaults(vmi)
	if n := len(vmi.Spec.Domain.Devices.Disks); n != 3 {
		t.Fatalf("%d disks after defaulting", n)
	}
	errs := field.ErrorList{
		field.Invalid(field.NewPath("spec", "domain", "devices", "disks").Index(2), "x", "a made-up error of the disk"),
		field.Invalid(field.NewPath("spec", "domain", "devices", "disks").Index(1).Child("name"), "scratch", "a made-up error of its name"),
		field.Invalid(field.NewPath("spec", "domain", "devices", "disks").Index(0).Child("name"), "root", "a written disk's error"),
	}
	errs = append(errs, ValidateVirtualMachineInstance(vmi)...)
	var got []string
	for _, e := range AsWritten(errs, vmi, written) {
		got = append(got, e.Field+": "+e.Detail)
	}
	for _, want := range []string{
		"spec.volumes[2]: a made-up error of the disk (on spec.domain.devices.disks[2], the disk kemu adds for this volume)",
		"spec.volumes[1].name: a made-up error of its name (on spec.domain.devices.disks[1].name, the disk kemu adds for this volume)",
		"spec.domain.devices.disks[0].name: a written disk's error",
	} {
		if !slices.Contains(got, want) {
			t.Errorf("errors %q lack %q", got, want)
		}
	}
	// Data_1 is not a DNS label: said of the volume once, not again of its disk.
	n := 0
	for _, g := range got {
		if strings.HasPrefix(g, "spec.volumes[2].name: ") {
			n++
		}
		if strings.Contains(g, "disks[2].name") {
			t.Errorf("the defaulted disk's name error is still there: %q", g)
		}
	}
	if n == 0 {
		t.Errorf("no error on spec.volumes[2].name: %q", got)
	}
}

func TestSplitPath(t *testing.T) {
	tests := []struct {
		in   string
		want string // joinPath of the steps, then the step count
		n    int
	}{
		{"spec.domain.devices.disks[2].name", "spec.domain.devices.disks[2].name", 6},
		{"metadata.annotations[hooks.kubevirt.io/hookSidecars]", "metadata.annotations[hooks.kubevirt.io/hookSidecars]", 3},
		{"spec.domain.resources.requests[memory]", "spec.domain.resources.requests[memory]", 5},
		{"spec.template.metadata.annotations[a.b/c].x", "spec.template.metadata.annotations[a.b/c].x", 6},
		{"[0].a", "[0].a", 2},
		{"", "", 0},
	}
	for _, tt := range tests {
		steps := SplitPath(tt.in)
		if got := joinPath(steps); got != tt.want || len(steps) != tt.n {
			t.Errorf("SplitPath(%q): %q in %d steps, want %q in %d", tt.in, got, len(steps), tt.want, tt.n)
		}
	}
	if got := FieldPath(SplitPath("metadata.annotations[a.b/c]")).String(); got != "metadata.annotations[a.b/c]" {
		t.Errorf("FieldPath: %q", got)
	}
}
