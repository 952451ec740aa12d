package validation

import (
	"slices"
	"sort"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

func TestValidateDataVolumeTemplates(t *testing.T) {
	const good = `{"source":{"http":{"url":"http://x/disk.img"}},"storage":{"resources":{"requests":{"storage":"1Gi"}}}}`
	tmpl := func(name, spec string) v1.DataVolumeTemplateSpec {
		t := v1.DataVolumeTemplateSpec{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if spec != "" {
			t.Spec = runtime.RawExtension{Raw: []byte(spec)}
		}
		return t
	}
	tests := []struct {
		name  string
		tmpls []v1.DataVolumeTemplateSpec
		// vols are the template's extra volumes: dataVolume names, or
		// "pvc:NAME" for a persistentVolumeClaim.
		vols []string
		ns   string
		want []string
	}{
		{name: "used by a dataVolume volume", tmpls: []v1.DataVolumeTemplateSpec{tmpl("dv", good)}, vols: []string{"dv"}},
		{name: "used by a persistentVolumeClaim volume", tmpls: []v1.DataVolumeTemplateSpec{tmpl("dv", good)}, vols: []string{"pvc:dv"}},
		{name: "not used", tmpls: []v1.DataVolumeTemplateSpec{tmpl("dv", good)}, vols: []string{"other"},
			want: []string{"Invalid value spec.dataVolumeTemplates[0].metadata.name"}},
		{name: "no name", tmpls: []v1.DataVolumeTemplateSpec{tmpl("", good)},
			want: []string{"Required value spec.dataVolumeTemplates[0].metadata.name"}},
		{name: "duplicate", tmpls: []v1.DataVolumeTemplateSpec{tmpl("dv", good), tmpl("dv", good)}, vols: []string{"dv"},
			want: []string{"Duplicate value spec.dataVolumeTemplates[1].metadata.name"}},
		{name: "another namespace", ns: "a",
			tmpls: []v1.DataVolumeTemplateSpec{func() v1.DataVolumeTemplateSpec {
				t := tmpl("dv", good)
				t.Namespace = "b"
				return t
			}()}, vols: []string{"dv"},
			want: []string{"Invalid value spec.dataVolumeTemplates[0].metadata.namespace"}},
		{name: "the VM's namespace", ns: "a",
			tmpls: []v1.DataVolumeTemplateSpec{func() v1.DataVolumeTemplateSpec {
				t := tmpl("dv", good)
				t.Namespace = "a"
				return t
			}()}, vols: []string{"dv"}},
		{name: "no spec", tmpls: []v1.DataVolumeTemplateSpec{tmpl("dv", "")}, vols: []string{"dv"},
			want: []string{"Required value spec.dataVolumeTemplates[0].spec"}},
		{name: "spec not an object", tmpls: []v1.DataVolumeTemplateSpec{tmpl("dv", `[1]`)}, vols: []string{"dv"},
			want: []string{"Invalid value spec.dataVolumeTemplates[0].spec"}},
		{name: "neither pvc nor storage", tmpls: []v1.DataVolumeTemplateSpec{tmpl("dv", `{"source":{"blank":{}}}`)}, vols: []string{"dv"},
			want: []string{"Required value spec.dataVolumeTemplates[0].spec.storage"}},
		{name: "pvc and storage", tmpls: []v1.DataVolumeTemplateSpec{tmpl("dv", `{"source":{"blank":{}},"pvc":{},"storage":{}}`)}, vols: []string{"dv"},
			want: []string{"Invalid value spec.dataVolumeTemplates[0].spec.storage"}},
		{name: "no source", tmpls: []v1.DataVolumeTemplateSpec{tmpl("dv", `{"pvc":{}}`)}, vols: []string{"dv"},
			want: []string{"Required value spec.dataVolumeTemplates[0].spec.source"}},
		{name: "sourceRef", tmpls: []v1.DataVolumeTemplateSpec{tmpl("dv", `{"sourceRef":{"kind":"DataSource","name":"fedora"},"storage":{}}`)}, vols: []string{"dv"}},
		{name: "external population", tmpls: []v1.DataVolumeTemplateSpec{tmpl("dv", `{"pvc":{"dataSourceRef":{"kind":"VolumeSnapshot","name":"s"}}}`)}, vols: []string{"dv"}},
		{name: "external population and a source", tmpls: []v1.DataVolumeTemplateSpec{tmpl("dv", `{"source":{"blank":{}},"pvc":{"dataSource":{"kind":"VolumeSnapshot","name":"s"}}}`)}, vols: []string{"dv"},
			want: []string{"Invalid value spec.dataVolumeTemplates[0].spec.source"}},
		{name: "two source kinds", tmpls: []v1.DataVolumeTemplateSpec{tmpl("dv", `{"source":{"blank":{},"http":{"url":"u"}},"storage":{}}`)}, vols: []string{"dv"},
			want: []string{"Invalid value spec.dataVolumeTemplates[0].spec.source"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := baseVMI().Spec
			for _, v := range tt.vols {
				if name, ok := strings.CutPrefix(v, "pvc:"); ok {
					spec.Volumes = append(spec.Volumes, v1.Volume{Name: "v" + name,
						PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: name}})
					continue
				}
				spec.Volumes = append(spec.Volumes, v1.Volume{Name: "v" + v, DataVolume: &v1.DataVolumeSource{Name: v}})
			}
			vm := &v1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: tt.ns}, Spec: v1.VirtualMachineSpec{
				RunStrategy: ptr(v1.RunStrategyAlways), Template: &v1.VirtualMachineInstanceTemplateSpec{Spec: spec},
				DataVolumeTemplates: tt.tmpls}}
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
