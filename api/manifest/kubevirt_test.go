package manifest

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/api/validation"
)

func TestIsKubeVirtField(t *testing.T) {
	tests := []struct {
		kind, path string
		want       bool
	}{
		{KindVMI, "spec.domain.devices.video", true},
		{KindVMI, "spec.domain.devices.video.type", true},
		{KindVMI, "spec.domain.devices.videos", false},
		{KindVMI, "spec.volumes[3].containerPath", true},
		{KindVMI, "spec.volumes[3].containerPath.path", true},
		{KindVMI, "spec.volumes[3].containerPath.size", false},
		{KindVMI, "spec.volumes.containerPath", false}, // a list needs an index
		{KindVMI, "spec.domain.devices.interfaces[0].passtBinding", true},
		{KindVMI, "spec.domain.devices.panicDevices[1].model", true},
		{KindVMI, "spec.domain.rebootPolicy", true},
		{KindVMI, "spec.domain.memory.reservedOverhead.addedOverhead", true},
		{KindVMI, "spec.domain.memory.guest.value", false}, // a scalar has no fields
		{KindVMI, "spec.domain.devices.rng.foo", false},    // an object without fields
		{KindVMI, "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchFields", true},
		{KindVMI, "spec.nodeSelector.kubernetes.io/arch", true}, // a map key with dots
		{KindVMI, "metadata.annotations.kubevirt.io/foo", true},
		{KindVMI, "status.volumeStatus[0].hotplugVolume", true},
		{KindVM, "spec.template.spec.domain.devices.video", true},
		{KindVM, "spec.template.metadata.labels.kubevirt.io/size", true},
		{KindVM, "spec.dataVolumeTemplates[0].spec.source.http.url", true},
		{KindVM, "spec.dataVolumeTemplates[0].spec.storage.resources.requests.storage", true},
		{KindVM, "spec.instancetype.inferFromVolume", true},
		{KindVM, "spec.preference.kind", true},
		{KindVM, "spec.template.spec.domain.devicez", false},
		{KindVM, "spec.domain", false},
		{KindMigration, "spec.addedNodeSelector.zone", true},
		{KindMigration, "spec.sendTo.migrationID", true},
		{KindMigration, "spec.vmName", false},
		{"KubeVirt", "spec.configuration", false},
	}
	for _, tt := range tests {
		if got := IsKubeVirtField(tt.kind, tt.path); got != tt.want {
			t.Errorf("IsKubeVirtField(%s, %s) = %v", tt.kind, tt.path, got)
		}
	}
	if !strings.Contains(kubeVirtSchemaSource, "KubeVirt v") {
		t.Errorf("schema source %q names no KubeVirt release", kubeVirtSchemaSource)
	}
}

// Every field kemu declares as a KubeVirt field it does not support is one.
func TestUnsupportedFieldsAreKubeVirtFields(t *testing.T) {
	for kind, obj := range map[string]any{KindVMI: v1.VirtualMachineInstance{}, KindVM: v1.VirtualMachine{}, KindMigration: v1.VirtualMachineInstanceMigration{}} {
		var paths []string
		unsupportedPaths(reflect.TypeOf(obj), "", &paths)
		if len(paths) == 0 {
			t.Fatalf("%s: no Unsupported fields found", kind)
		}
		for _, p := range paths {
			if !IsKubeVirtField(kind, p) {
				t.Errorf("%s: %s is declared Unsupported but is not in KubeVirt's schema", kind, p)
			}
		}
	}
}

func unsupportedPaths(t reflect.Type, prefix string, out *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(reflect.TypeFor[v1.UnsupportedField]()) || t.Implements(reflect.TypeFor[v1.UnsupportedField]()) {
		*out = append(*out, prefix)
		return
	}
	switch t.Kind() {
	case reflect.Slice:
		unsupportedPaths(t.Elem(), prefix+"[0]", out)
	case reflect.Struct:
		if t.PkgPath() != reflect.TypeFor[v1.VirtualMachineInstance]().PkgPath() {
			return
		}
		for name, ft := range jsonFields(t) {
			p := name
			if prefix != "" {
				p = prefix + "." + name
			}
			unsupportedPaths(ft, p, out)
		}
	}
}

// A KubeVirt field kemu's types do not have is reported as unsupported, a
// field that is nobody's as unknown, and each is left out by convert.
// (testdata/kubevirt-fields.yaml is outside testdata/*/*: its unknown fields
// do not survive TestRoundTrip.)
func TestKubeVirtFieldsKemuDoesNotDeclare(t *testing.T) {
	docs := readFile(t, "testdata/kubevirt-fields.yaml")
	if len(docs) != 1 {
		t.Fatalf("%d documents", len(docs))
	}
	got := map[string]string{}
	for _, e := range docs[0].Errors {
		got[e.Field] = e.Type.String() + ": " + e.Detail
	}
	unsupported := "Forbidden: " + validation.UnsupportedDetail
	unknown := "Forbidden: " + UnknownFieldDetail
	want := map[string]string{
		"spec.template.spec.domain.rebootPolicy":                      unsupported,
		"spec.template.spec.domain.memory.reservedOverhead":           unsupported,
		"spec.template.spec.domain.devices.video":                     unsupported,
		"spec.template.spec.domain.devices.panicDevices":              unsupported,
		"spec.template.spec.domain.devices.interfaces[0].macvtap":     unsupported,
		"spec.template.spec.domain.devices.interfaces[0].colour":      unknown,
		"spec.template.spec.domain.devices.diskz":                     unknown,
		"spec.template.spec.volumes[1].memoryDump":                    unsupported,
		"spec.template.spec.volumes[2].containerDisk.sizeGB":          unknown,
		"spec.template.spec.volumes[2].containerDisk.imagePullSecret": unsupported,
	}
	for p, w := range want {
		if got[p] != w {
			t.Errorf("%s: %q, want %q", p, got[p], w)
		}
	}
	for p, g := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("unexpected error %s: %s", p, g)
		}
	}
	c, err := Convert(docs[0])
	if err != nil {
		t.Fatal(err)
	}
	var wantDropped []string
	for p := range want {
		wantDropped = append(wantDropped, p)
	}
	slices.Sort(wantDropped)
	if !slices.Equal(c.Dropped, wantDropped) {
		t.Errorf("dropped %q, want %q", c.Dropped, wantDropped)
	}
	// What is left out leaves the volume without a source: that is said of
	// the converted manifest.
	if !slices.ContainsFunc(c.Errors, func(e *field.Error) bool { return e.Field == "spec.template.spec.volumes[1]" }) {
		t.Errorf("converted manifest's errors %v lack the volume left without a source", c.Errors)
	}
}
