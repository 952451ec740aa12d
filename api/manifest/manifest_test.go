package manifest

import (
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	itv1beta1 "github.com/kemu-dev/kemu/api/instancetype/v1beta1"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/api/validation"
)

func readString(t *testing.T, s string) []*Document {
	t.Helper()
	docs, err := Read(strings.NewReader(s))
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	return docs
}

func readFile(t *testing.T, name string) []*Document {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return readString(t, string(data))
}

func keys(errs field.ErrorList) []string {
	out := make([]string, 0, len(errs))
	for _, e := range errs {
		out = append(out, e.Type.String()+" "+e.Field)
	}
	sort.Strings(out)
	return out
}

// KubeVirt-style manifests validate and convert cleanly, and what convert
// writes reads back as a valid kemu manifest.
func TestKubeVirtManifests(t *testing.T) {
	files, _ := filepath.Glob("testdata/kubevirt/*")
	if len(files) == 0 {
		t.Fatal("no testdata")
	}
	kinds := map[string]bool{}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			for _, d := range readFile(t, f) {
				kinds[d.Kind] = true
				if !d.FromKubeVirt {
					t.Errorf("%s: not recognised as KubeVirt", d.Describe())
				}
				if len(d.Errors) > 0 {
					t.Errorf("%s: %v", d.Describe(), d.Errors)
				}
				c, err := Convert(d)
				if err != nil {
					t.Fatal(err)
				}
				if len(c.Dropped) > 0 || len(c.Errors) > 0 {
					t.Errorf("%s: dropped %v errors %v", d.Describe(), c.Dropped, c.Errors)
				}
				out, err := yaml.Marshal(c.Object)
				if err != nil {
					t.Fatal(err)
				}
				back := readString(t, string(out))
				if len(back) != 1 || back[0].FromKubeVirt || len(back[0].Errors) > 0 {
					t.Errorf("converted manifest does not read back cleanly:\n%s\n%+v", out, back[0].Errors)
				}
				if !equality.Semantic.DeepEqual(back[0].Object, d.Object) {
					t.Errorf("converted object differs from the original's")
				}
			}
		})
	}
	for _, k := range []string{KindVMI, KindVM, KindMigration, itv1beta1.KindInstancetype, itv1beta1.KindClusterInstancetype,
		itv1beta1.KindPreference, itv1beta1.KindClusterPreference} {
		if !kinds[k] {
			t.Errorf("testdata has no %s", k)
		}
	}
}

func TestBadManifests(t *testing.T) {
	const head = "apiVersion: kemu.dev/v1alpha1\nkind: VirtualMachineInstance\nmetadata: {name: vm}\n"
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{
			name: "KubeVirt GPUs, SR-IOV, a hotpluggable dataVolume",
			in:   mustRead(t, "testdata/bad/unsupported.yaml"),
			want: []string{
				"Forbidden spec.domain.devices.gpus",
				"Forbidden spec.domain.devices.interfaces[1].sriov",
				"Forbidden spec.volumes[0].dataVolume.hotpluggable",
			},
		},
		{
			name: "unknown field (typo)",
			in:   head + "spec:\n  domain:\n    memory: {guest: 64Mi}\n    devicez: {}\n    devices: {}\n",
			want: []string{"Forbidden spec.domain.devicez"},
		},
		{
			name: "unknown field inside a list",
			in:   head + "spec:\n  domain:\n    memory: {guest: 64Mi}\n    devices: {}\n  volumes:\n  - name: a\n    containerDisk: {image: x:1, sizeGB: 4}\n",
			want: []string{"Forbidden spec.volumes[0].containerDisk.sizeGB"},
		},
		{
			name: "JSON with an unsupported field",
			in:   `{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","metadata":{"name":"vm"},"spec":{"updateVolumesStrategy":"Migration","runStrategy":"Always","template":{"spec":{"domain":{"memory":{"guest":"64Mi"},"devices":{}}}}}}`,
			want: []string{"Forbidden spec.updateVolumesStrategy"},
		},
		{
			name: "KubeVirt instance type with what kemu cannot run",
			in: `apiVersion: instancetype.kubevirt.io/v1beta1
kind: VirtualMachineClusterInstancetype
metadata: {name: cx1.medium}
spec:
  cpu: {guest: 1, dedicatedCPUPlacement: true, isolateEmulatorThread: true, maxSockets: 1, numa: {guestMappingPassthrough: {}}}
  memory: {guest: 2Gi, hugepages: {pageSize: 2Mi}}
  ioThreadsPolicy: auto
`,
			// dedicatedCPUPlacement, isolateEmulatorThread, numa and hugepages are kemu's (#23).
			want: []string{"Forbidden spec.cpu.maxSockets", "Forbidden spec.ioThreadsPolicy"},
		},
		{
			name: "KubeVirt preference with what kemu cannot run",
			in: `apiVersion: instancetype.kubevirt.io/v1beta1
kind: VirtualMachineClusterPreference
metadata: {name: fedora}
spec:
  devices: {preferredDiskBus: virtio, preferredTPM: {}, preferredDiskDedicatedIoThread: true}
  features: {preferredSmm: {}}
  firmware: {preferredEfi: {secureBoot: true, persistent: true}}
  preferredArchitecture: amd64
  requirements: {architecture: amd64, cpu: {guest: 1}}
`,
			want: []string{"Forbidden spec.devices.preferredDiskDedicatedIoThread", "Forbidden spec.devices.preferredTPM",
				"Forbidden spec.features.preferredSmm", "Forbidden spec.firmware.preferredEfi.persistent",
				"Forbidden spec.preferredArchitecture", "Forbidden spec.requirements.architecture"},
		},
		{
			name: "instance type without cpu and memory",
			in:   "apiVersion: instancetype.kemu.dev/v1beta1\nkind: VirtualMachineInstancetype\nmetadata: {name: empty}\nspec: {}\n",
			want: []string{"Required value spec.cpu.guest", "Required value spec.memory.guest"},
		},
		{
			name: "KubeVirt's removed instance type versions",
			in:   "apiVersion: instancetype.kubevirt.io/v1alpha2\nkind: VirtualMachineInstancetype\nmetadata: {name: old}\nspec: {}\n",
			want: []string{"Unsupported value apiVersion"},
		},
		{
			name: "a kind of the other group",
			in:   "apiVersion: instancetype.kemu.dev/v1beta1\nkind: VirtualMachine\nmetadata: {name: vm}\nspec: {}\n",
			want: []string{"Unsupported value kind"},
		},
		{
			name: "VM matchers",
			in: `apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata: {name: vm}
spec:
  instancetype: {kind: Flavor}
  preference: {name: p, kind: VirtualMachinePreference, inferFromVolume: nope, inferFromVolumeFailurePolicy: Maybe}
  template:
    spec:
      domain: {devices: {}}
`,
			want: []string{"Forbidden spec.preference.kind", "Forbidden spec.preference.name", "Invalid value spec.instancetype.kind",
				"Not found spec.preference.inferFromVolume", "Required value spec.instancetype.name",
				"Unsupported value spec.preference.inferFromVolumeFailurePolicy"},
		},
		{
			name: "wrong type",
			in:   head + "spec:\n  domain:\n    memory: {guest: 64Mi}\n    cpu: {cores: two}\n    devices: {}\n",
			want: []string{"Invalid value spec.domain.cpu.cores"},
		},
		{
			name: "a malformed quantity hides no other error",
			in: `apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata: {name: vm}
spec:
  domain:
    resources:
      requests:
        memory: 1g
    devicez: {}
    devices:
      disks:
      - name: nope
        disk: {bus: sata}
`,
			want: []string{
				"Forbidden spec.domain.devicez",
				"Invalid value spec.domain.devices.disks[0].name",
				"Invalid value spec.domain.resources.requests.memory",
			},
		},
		{
			name: "several bad values, each with its path",
			in: `apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata: {name: vm}
spec:
  running: "yes"
  template:
    spec:
      domain:
        cpu: {cores: two, sockets: -1}
        memory: {guest: 64 Mi}
        devices:
          disks:
          - name: root
            bootOrder: first
          interfaces: {name: default}
      terminationGracePeriodSeconds: 1.5
      volumes:
      - name: root
        containerDisk: {image: "x:1"}
      - name: scratch
        emptyDisk: {capacity: 10 GB}
`,
			want: []string{
				"Invalid value spec.running",
				"Invalid value spec.template.spec.domain.cpu.cores",
				"Invalid value spec.template.spec.domain.cpu.sockets",
				"Invalid value spec.template.spec.domain.devices.disks[0].bootOrder",
				"Invalid value spec.template.spec.domain.devices.interfaces",
				"Invalid value spec.template.spec.domain.memory.guest",
				"Invalid value spec.template.spec.terminationGracePeriodSeconds",
				"Invalid value spec.template.spec.volumes[1].emptyDisk.capacity",
			},
		},
		{
			name: "errors on defaulted fields are reported where they were written",
			in: `apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata: {name: vm}
spec:
  domain:
    resources: {requests: {memory: 16Mi}}
    machine: {type: pc}
    devices:
      disks:
      - {name: iso, cdrom: {}}
  volumes:
  - {name: iso, containerDisk: {image: "x:1"}}
  - {name: Scratch, emptyDisk: {capacity: 1Gi}}
`,
			want: []string{
				"Invalid value spec.domain.devices.disks[0].cdrom",
				"Invalid value spec.domain.resources.requests.memory",
				"Invalid value spec.volumes[1].name",
			},
		},
		{
			name: "JSON: an object where a list belongs, a number where a string belongs",
			in:   `{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstance","metadata":{"name":"vm","labels":{"a":1}},"spec":{"domain":{"memory":{"guest":"64Mi"},"devices":{"disks":{}}},"volumes":[{"name":"a","containerDisk":{"image":7}}]}}`,
			want: []string{
				"Invalid value metadata.labels.a",
				"Invalid value spec.domain.devices.disks",
				"Invalid value spec.volumes[0].containerDisk.image",
			},
		},
		{
			name: "duplicate field",
			in:   `{"apiVersion":"kemu.dev/v1alpha1","kind":"VirtualMachineInstance","metadata":{"name":"vm"},"spec":{"domain":{"memory":{"guest":"64Mi"},"memory":{"guest":"64Mi"},"devices":{}}}}`,
			want: []string{"Duplicate value spec.domain.memory"},
		},
		{
			name: "foreign apiVersion",
			in:   "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n",
			want: []string{"Unsupported value apiVersion"},
		},
		{
			name: "KubeVirt kind kemu does not serve",
			in:   "apiVersion: kubevirt.io/v1\nkind: KubeVirt\nmetadata: {name: kubevirt}\n",
			want: []string{"Unsupported value kind"},
		},
		{
			name: "a manifest with several mistakes reports them all",
			in: head + `spec:
  domain:
    memory: {guest: 16Mi}
    devices:
      disks:
      - name: nope
      interfaces:
      - name: lonely
        masquerade: {}
  volumes:
  - name: both
    containerDisk: {image: "x:1"}
    emptyDisk: {capacity: 1Gi}
`,
			want: []string{
				"Invalid value spec.domain.devices.disks[0].name",
				"Invalid value spec.domain.devices.interfaces[0].name",
				"Invalid value spec.domain.memory.guest",
				"Invalid value spec.volumes[0]",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			docs := readString(t, tt.in)
			if len(docs) != 1 {
				t.Fatalf("%d documents", len(docs))
			}
			if got := keys(docs[0].Errors); !slices.Equal(got, tt.want) {
				t.Errorf("errors:\n got  %q\n want %q\nfull: %v", got, tt.want, docs[0].Errors)
			}
		})
	}
}

// A bad value's error names its path and the value as written, and says
// what the field takes.
func TestBadValueMessages(t *testing.T) {
	const head = "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata: {name: vm}\nspec:\n  domain:\n    devices: {}\n"
	tests := []struct{ in, want string }{
		{head + "    resources: {requests: {memory: 1g}}\n",
			`spec.domain.resources.requests.memory: Invalid value: "1g": must be a quantity such as 512Mi, 1Gi or 1G (suffixes are case-sensitive): quantities must match`},
		{head + "    memory: {guest: 1Gi}\n    cpu: {cores: two}\n", `spec.domain.cpu.cores: Invalid value: "two": must be an integer from 0 to 4294967295`},
		{head + "    memory: {guest: 1Gi}\n    cpu: {cores: -2}\n", `spec.domain.cpu.cores: Invalid value: -2: must be an integer from 0 to 4294967295`},
		{head + "    memory: {guest: 1Gi}\n    machine: {type: [q35]}\n", `spec.domain.machine.type: Invalid value: "<list>": must be a string`},
		{head + "    memory: {guest: 1Gi}\n    features: {acpi: {enabled: 1}}\n", `spec.domain.features.acpi.enabled: Invalid value: 1: must be true or false`},
	}
	for _, tt := range tests {
		docs := readString(t, tt.in)
		var msgs []string
		for _, e := range docs[0].Errors {
			msgs = append(msgs, e.Error())
		}
		if !slices.ContainsFunc(msgs, func(m string) bool { return strings.HasPrefix(m, tt.want) }) {
			t.Errorf("errors %q lack %q", msgs, tt.want)
		}
	}
}

func mustRead(t *testing.T, name string) string {
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// Convert leaves out what kemu cannot carry and says so.
func TestConvertDropsUnsupported(t *testing.T) {
	docs := readFile(t, "testdata/bad/unsupported.yaml")
	c, err := Convert(docs[0])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"spec.domain.devices.gpus", "spec.domain.devices.interfaces[1].sriov", "spec.volumes[0].dataVolume.hotpluggable"}
	if !slices.Equal(c.Dropped, want) {
		t.Errorf("dropped %q, want %q", c.Dropped, want)
	}
	out, _ := yaml.Marshal(c.Object)
	for _, gone := range []string{"gpus", "sriov", "hotpluggable", "kubevirt.io"} {
		if strings.Contains(string(out), gone) {
			t.Errorf("converted manifest still has %q:\n%s", gone, out)
		}
	}
	// What is left is valid kemu: the interface on the Multus network,
	// its sriov binding dropped, defaults to bridge.
	if len(c.Errors) != 0 {
		t.Errorf("the converted VMI has errors: %v", c.Errors)
	}
}

// YAML -> Go -> YAML -> Go keeps everything, Unsupported values included.
func TestRoundTrip(t *testing.T) {
	files, _ := filepath.Glob("testdata/*/*")
	for _, f := range files {
		for _, d := range readFile(t, f) {
			if d.Object == nil {
				continue
			}
			out, err := yaml.Marshal(d.Object)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			back := readString(t, string(out))
			if len(back) != 1 {
				t.Fatalf("%s: %d documents", f, len(back))
			}
			if !equality.Semantic.DeepEqual(back[0].Object, d.Object) {
				t.Errorf("%s %s: round trip changed the object:\n%s", f, d.Describe(), out)
			}
			if got, want := keys(back[0].Errors), keys(d.Errors); !slices.Equal(got, want) {
				t.Errorf("%s: errors after round trip %q, before %q", f, got, want)
			}
		}
	}
}

func TestListsAndMultipleDocuments(t *testing.T) {
	in := `# leading comment
---
apiVersion: v1
kind: List
items:
- apiVersion: kemu.dev/v1alpha1
  kind: VirtualMachineInstanceMigration
  metadata: {name: m1}
  spec: {vmiName: a}
- apiVersion: kubevirt.io/v1
  kind: VirtualMachineInstanceMigration
  metadata: {name: m2}
  spec: {vmiName: b}
---
---
apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstanceMigration
metadata: {name: m3}
spec: {}
`
	docs := readString(t, in)
	if len(docs) != 3 {
		t.Fatalf("%d documents, want 3", len(docs))
	}
	if len(docs[0].Errors)+len(docs[1].Errors) != 0 || !docs[1].FromKubeVirt {
		t.Errorf("list items: %v %v", docs[0].Errors, docs[1].Errors)
	}
	if got := keys(docs[2].Errors); !slices.Equal(got, []string{"Required value spec.vmiName"}) {
		t.Errorf("third: %q", got)
	}
	if m, ok := docs[1].Object.(*v1.VirtualMachineInstanceMigration); !ok || m.Spec.VMIName != "b" {
		t.Errorf("second object %#v", docs[1].Object)
	}
}

func TestNotYAML(t *testing.T) {
	if _, err := Read(strings.NewReader("{not: [yaml")); err == nil {
		t.Error("no error for broken YAML")
	}
}

// Every Forbidden error about a KubeVirt field says it is unsupported.
func TestUnsupportedMessages(t *testing.T) {
	for _, d := range readFile(t, "testdata/bad/unsupported.yaml") {
		for _, e := range d.Errors {
			if !strings.Contains(e.Error(), "not support") || !strings.HasPrefix(e.Error(), e.Field) {
				t.Errorf("message %q does not name the field and say it is unsupported", e.Error())
			}
			if e.Detail != validation.UnsupportedDetail {
				t.Errorf("detail %q", e.Detail)
			}
		}
	}
}

// KubeVirt serves kubevirt.io/v1 and the deprecated v1alpha3 with one
// schema; any other version is refused by name.
func TestAPIVersions(t *testing.T) {
	const body = "kind: VirtualMachineInstanceMigration\nmetadata: {name: m}\nspec: {vmiName: vm}\n"
	tests := []struct {
		apiVersion   string
		fromKubeVirt bool
		want         []string
	}{
		{"kemu.dev/v1alpha1", false, nil},
		{"kubevirt.io/v1", true, nil},
		{"kubevirt.io/v1alpha3", true, nil},
		{"kubevirt.io/v9", false, []string{"Unsupported value apiVersion"}},
		{"kubevirt.io/v1beta1", false, []string{"Unsupported value apiVersion"}},
		{"kubevirt.io", false, []string{"Unsupported value apiVersion"}},
		{"kemu.dev/v1", false, []string{"Unsupported value apiVersion"}},
		{"pool.kubevirt.io/v1alpha1", false, []string{"Unsupported value apiVersion"}},
	}
	for _, tt := range tests {
		t.Run(tt.apiVersion, func(t *testing.T) {
			docs := readString(t, "apiVersion: "+tt.apiVersion+"\n"+body)
			if len(docs) != 1 {
				t.Fatalf("%d documents", len(docs))
			}
			d := docs[0]
			if got := keys(d.Errors); !slices.Equal(got, tt.want) {
				t.Errorf("errors %q, want %q", got, tt.want)
			}
			if d.FromKubeVirt != tt.fromKubeVirt {
				t.Errorf("FromKubeVirt %v", d.FromKubeVirt)
			}
			if tt.want != nil {
				msg := d.Errors[0].Error()
				for _, v := range AcceptedAPIVersions() {
					if !strings.Contains(msg, v) {
						t.Errorf("%q does not list %s", msg, v)
					}
				}
			}
		})
	}
}

// Every document of a stream is read, whatever separates it: "---", a
// document end marker "...", or "---" with content on its line.
func TestDocumentMarkers(t *testing.T) {
	const m = "apiVersion: kemu.dev/v1alpha1\nkind: VirtualMachineInstanceMigration\nmetadata: {name: %s}\nspec: {vmiName: vm}\n"
	doc := func(name string) string { return strings.Replace(m, "%s", name, 1) }
	tests := []struct {
		name  string
		in    string
		names []string
	}{
		{"three dashes", doc("a") + "---\n" + doc("b"), []string{"a", "b"}},
		{"document end then a bare document", doc("a") + "...\n" + doc("b"), []string{"a", "b"}},
		{"document end with a comment", doc("a") + "... # end\n" + doc("b"), []string{"a", "b"}},
		{"document end then three dashes", doc("a") + "...\n---\n" + doc("b"), []string{"a", "b"}},
		{"document end at the end", doc("a") + "...\n", []string{"a"}},
		{"document end, CRLF", strings.ReplaceAll(doc("a")+"...\n"+doc("b"), "\n", "\r\n"), []string{"a", "b"}},
		{"dots inside a block scalar are content", "apiVersion: kemu.dev/v1alpha1\nkind: VirtualMachineInstanceMigration\nmetadata:\n  name: a\n  annotations:\n    note: |\n      ...\n      more\nspec: {vmiName: vm}\n", []string{"a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var names []string
			for _, d := range readString(t, tt.in) {
				names = append(names, d.Name)
				if len(d.Errors) > 0 {
					t.Errorf("%s: %v", d.Describe(), d.Errors)
				}
			}
			if !slices.Equal(names, tt.names) {
				t.Errorf("documents %q, want %q", names, tt.names)
			}
		})
	}
	// What cannot be split is refused, never half read.
	for _, in := range []string{doc("a") + "--- !!map\n" + doc("b"), "%YAML 1.1\n---\n" + doc("a") + "...\n%YAML 1.1\n---\n" + doc("b")} {
		docs, err := Read(strings.NewReader(in))
		if err == nil && len(docs) != 2 {
			t.Errorf("%q: %d documents and no error", in, len(docs))
		}
	}
}

// A part holding two YAML documents fails rather than losing the second.
func TestReadDocumentRefusesTwo(t *testing.T) {
	_, err := readDocument(nil, []byte("apiVersion: kemu.dev/v1alpha1\n---\nkind: VirtualMachine\n"))
	if err == nil || !strings.Contains(err.Error(), "2 YAML documents") {
		t.Errorf("error %v", err)
	}
}

// KubeVirt's features.smm and a writable CD-ROM are read as KubeVirt means
// them; SMM off cannot go with Secure Boot.
func TestSMMAndWritableCDROM(t *testing.T) {
	const vmi = `apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata: {name: vm}
spec:
  domain:
    memory: {guest: 1Gi}
    features:
      smm: {enabled: SMM}
    firmware:
      bootloader:
        efi: {secureBoot: SECURE}
    devices:
      disks:
      - name: iso
        cdrom: {bus: sata, readonly: false}
  volumes:
  - name: iso
    containerDisk: {image: "example/iso:1"}
`
	tests := []struct {
		smm, secure string
		want        []string
	}{
		{"true", "true", nil},
		{"true", "false", nil},
		{"false", "false", nil},
		{"false", "true", []string{"Invalid value spec.domain.features.smm.enabled"}},
	}
	for _, tt := range tests {
		in := strings.NewReplacer("SMM", tt.smm, "SECURE", tt.secure).Replace(vmi)
		docs := readString(t, in)
		if got := keys(docs[0].Errors); !slices.Equal(got, tt.want) {
			t.Errorf("smm %s, secureBoot %s: errors %q, want %q", tt.smm, tt.secure, got, tt.want)
		}
	}
}
