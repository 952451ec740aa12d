package admission

import (
	"slices"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
)

func TestValidateVMIM(t *testing.T) {
	const good = "metadata: {name: m, namespace: ns}\nspec: {vmiName: vm}\n"
	tests := []struct {
		name     string
		op       admissionv1.Operation
		obj, old string
		want     []string
	}{
		{name: "valid", op: admissionv1.Create, obj: good},
		{name: "no vmiName", op: admissionv1.Create, obj: "metadata: {name: m}\nspec: {}\n", want: []string{"spec.vmiName: FieldValueRequired"}},
		{name: "bad vmiName", op: admissionv1.Create, obj: "metadata: {name: m}\nspec: {vmiName: Not A Name}\n", want: []string{"spec.vmiName: FieldValueInvalid"}},
		{name: "unsupported", op: admissionv1.Create, obj: "metadata: {name: m}\nspec: {vmiName: vm, sendTo: {}}\n", want: []string{"spec.sendTo: FieldValueForbidden"}},
		{name: "metadata update", op: admissionv1.Update, old: good, obj: "metadata: {name: m, namespace: ns, finalizers: [x]}\nspec: {vmiName: vm}\n"},
		{name: "spec update", op: admissionv1.Update, old: good, obj: "metadata: {name: m}\nspec: {vmiName: other}\n", want: []string{"spec: FieldValueForbidden"}},
		{name: "delete", op: admissionv1.Delete, old: good},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(t, PathValidateVMIM, request(t, vmimKind, tt.op, "alice", tt.obj, tt.old))
			got := causes(resp)
			slices.Sort(got)
			if resp.Allowed != (len(tt.want) == 0) || !slices.Equal(got, tt.want) {
				t.Errorf("allowed %v, causes %q, want %q (%+v)", resp.Allowed, got, tt.want, resp.Result)
			}
		})
	}
}
