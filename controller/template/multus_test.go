package template

import (
	"encoding/json"
	"testing"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

func TestMultusAnnotations(t *testing.T) {
	svc := NewService(Options{LauncherImage: "l"})
	tests := []struct {
		name   string
		mod    func(*v1.VirtualMachineInstance)
		want   map[string]string
		sel    []networkSelection // NetworksAnnotation, decoded
		absent []string
	}{
		{
			name: "pod network only: no Multus annotation, a VMI's own are not copied",
			mod: func(x *v1.VirtualMachineInstance) {
				x.Annotations = map[string]string{launcherpod.NetworksAnnotation: `[{"name":"evil"}]`, launcherpod.DefaultNetworkAnnotation: "evil", "x.k8s.v1.cni.cncf.io/y": "z", "keep": "1"}
			},
			want:   map[string]string{"keep": "1"},
			absent: []string{launcherpod.NetworksAnnotation, launcherpod.DefaultNetworkAnnotation, "x.k8s.v1.cni.cncf.io/y"},
		},
		{
			name: "secondary networks: KubeVirt's hashed names, namespaces, the interface's MAC",
			mod: func(x *v1.VirtualMachineInstance) {
				x.Annotations = map[string]string{launcherpod.NetworksAnnotation: `[{"name":"evil"}]`}
				x.Spec.Networks = []v1.Network{{Name: "default", Pod: &v1.PodNetwork{}},
					{Name: "blue", Multus: &v1.MultusNetwork{NetworkName: "blue-nad"}},
					{Name: "red", Multus: &v1.MultusNetwork{NetworkName: "other/red-nad"}}}
				x.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "default"}, {Name: "red"}, {Name: "blue", MacAddress: "02:00:00:00:00:0b"}}
			},
			sel: []networkSelection{
				// sha256("blue") = 16477688c0e00699c6cfa4497a3612d7e83c532062b64b250fed8908128ed548
				{Name: "blue-nad", Namespace: "ns", MAC: "02:00:00:00:00:0b", Interface: "pod16477688c0e"},
				// sha256("red") = b1f51a511f1da0cd348b8f8598db32e61cb963e5fc69e2b41485bf99590ed75a
				{Name: "red-nad", Namespace: "other", Interface: "podb1f51a511f1"},
			},
			absent: []string{launcherpod.DefaultNetworkAnnotation},
		},
		{
			name: "the default Multus network",
			mod: func(x *v1.VirtualMachineInstance) {
				x.Spec.Networks = []v1.Network{{Name: "main", Multus: &v1.MultusNetwork{NetworkName: "kube-system/main", Default: true}}}
				x.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "main"}}
			},
			want:   map[string]string{launcherpod.DefaultNetworkAnnotation: "kube-system/main"},
			absent: []string{launcherpod.NetworksAnnotation},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod, err := svc.Render(Input{VMI: vmi("256Mi", tc.mod)})
			if err != nil {
				t.Fatal(err)
			}
			got := pod.Annotations
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("annotation %s = %q, want %q (all: %v)", k, got[k], v, got)
				}
			}
			for _, k := range tc.absent {
				if _, ok := got[k]; ok {
					t.Errorf("annotation %s is set: %q", k, got[k])
				}
			}
			if tc.sel != nil {
				var sel []networkSelection
				if err := json.Unmarshal([]byte(got[launcherpod.NetworksAnnotation]), &sel); err != nil {
					t.Fatalf("%s: %v", launcherpod.NetworksAnnotation, err)
				}
				if len(sel) != len(tc.sel) {
					t.Fatalf("%s = %s, want %+v", launcherpod.NetworksAnnotation, got[launcherpod.NetworksAnnotation], tc.sel)
				}
				for i := range sel {
					if sel[i] != tc.sel[i] {
						t.Errorf("element %d = %+v, want %+v", i, sel[i], tc.sel[i])
					}
				}
			}
		})
	}
}

// A VMI whose only network is Multus still needs a tap.
func TestNeedsTunMultus(t *testing.T) {
	x := vmi("256Mi", func(x *v1.VirtualMachineInstance) {
		x.Spec.Networks = []v1.Network{{Name: "blue", Multus: &v1.MultusNetwork{NetworkName: "blue", Default: true}}}
		x.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "blue"}}
	})
	if !NeedsTun(x) {
		t.Error("NeedsTun: false for a Multus network")
	}
}
