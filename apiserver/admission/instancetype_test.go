package admission

import (
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"

	kemufake "github.com/kemu-dev/kemu/api/client/clientset/versioned/fake"
	itv1beta1 "github.com/kemu-dev/kemu/api/instancetype/v1beta1"
	"github.com/kemu-dev/kemu/kube/instancetypes"
)

const instancetypeVM = `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachine
metadata: {name: vm, namespace: ns}
spec:
  runStrategy: Always
  instancetype: {name: small, kind: VirtualMachineInstancetype}
  template:
    spec:
      domain:
        devices: {}
      volumes:
      - {name: root, containerDisk: {image: example/os:1}}
`

// With the instance types at hand, the VM admission refuses a VM that
// conflicts with its instance type, naming the fields, and judges the
// template as expanded; one naming an instance type not created yet passes.
func TestValidateVMInstancetype(t *testing.T) {
	kemu := kemufake.NewSimpleClientset(&itv1beta1.VirtualMachineInstancetype{
		ObjectMeta: metav1.ObjectMeta{Name: "small", Namespace: "ns"},
		Spec: itv1beta1.VirtualMachineInstancetypeSpec{
			CPU:    itv1beta1.CPUInstancetype{Guest: 2},
			Memory: itv1beta1.MemoryInstancetype{Guest: resource.MustParse("256Mi")},
		},
	})
	kube := kubefake.NewClientset(&corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "bare", Namespace: "ns"},
	})
	cfg := Config{Instancetypes: &instancetypes.Lookup{Kube: kube, Kemu: kemu}}.withDefaults()
	tests := []struct {
		name string
		obj  string
		want []string
	}{
		{name: "expanded", obj: instancetypeVM},
		{name: "conflicts", obj: strings.Replace(instancetypeVM, "devices: {}", "cpu: {sockets: 2}\n        memory: {guest: 128Mi}\n        devices: {}", 1),
			want: []string{"spec.template.spec.domain.cpu.sockets: FieldValueForbidden", "spec.template.spec.domain.memory.guest: FieldValueForbidden"}},
		{name: "an instance type created later", obj: strings.Replace(instancetypeVM, "name: small", "name: later", 1)},
		{name: "an unknown kind", obj: strings.Replace(instancetypeVM, "kind: VirtualMachineInstancetype", "kind: Flavor", 1),
			want: []string{"spec.instancetype.kind: FieldValueInvalid"}},
		{name: "inference refused", obj: strings.Replace(strings.Replace(instancetypeVM,
			"{name: small, kind: VirtualMachineInstancetype}", "{inferFromVolume: root}", 1),
			"containerDisk: {image: example/os:1}", "persistentVolumeClaim: {claimName: bare}", 1),
			want: []string{"spec.instancetype: FieldValueInvalid"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := cfg.validateVM(request(t, vmKind, admissionv1.Create, "alice", tt.obj, ""))
			got := causes(resp)
			slices.Sort(got)
			if resp.Allowed != (len(tt.want) == 0) || !slices.Equal(got, tt.want) {
				t.Errorf("allowed %v, causes %q, want %q (%+v)", resp.Allowed, got, tt.want, resp.Result)
			}
		})
	}
}
