package validation

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

func TestFeatureAnnotations(t *testing.T) {
	tests := []struct {
		name        string
		annotations map[string]string
		want        []string
	}{
		{name: "none"},
		{name: "unrelated and bookkeeping", annotations: map[string]string{"example.com/x": "1", "kubevirt.io/latest-observed-api-version": "v1"}},
		{
			name: "sidecar hook and ignition",
			annotations: map[string]string{
				"hooks.kubevirt.io/hookSidecars": `[{"image":"registry:5000/hook"}]`,
				"kubevirt.io/ignitiondata":       "{}",
			},
			want: []string{
				"Forbidden metadata.annotations[hooks.kubevirt.io/hookSidecars]",
				"Forbidden metadata.annotations[kubevirt.io/ignitiondata]",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmi := baseVMI()
			vmi.Annotations = tt.annotations
			v1.SetVirtualMachineInstanceDefaults(vmi)
			if got := errorKeys(ValidateVirtualMachineInstance(vmi)); !slices.Equal(got, tt.want) {
				t.Errorf("VMI errors:\n got  %q\n want %q", got, tt.want)
			}
			vm := &v1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "vm"}, Spec: v1.VirtualMachineSpec{
				Template: &v1.VirtualMachineInstanceTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: tt.annotations}, Spec: baseVMI().Spec}}}
			v1.SetVirtualMachineDefaults(vm)
			var want []string
			for _, w := range tt.want {
				want = append(want, "Forbidden spec.template."+w[len("Forbidden "):])
			}
			if got := errorKeys(ValidateVirtualMachine(vm)); !slices.Equal(got, want) {
				t.Errorf("VM errors:\n got  %q\n want %q", got, want)
			}
		})
	}
}
