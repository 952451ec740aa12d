package admission

import (
	"context"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
)

const goodVM = `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachine
metadata: {name: vm, namespace: ns}
spec:
  running: true
  template:
    spec:
      domain:
        memory: {guest: 128Mi}
        devices:
          disks:
          - {name: root}
      volumes:
      - {name: root, containerDisk: {image: example/os:1}}
`

// A VM's template is validated as a VMI spec under spec.template.spec, on
// create and on a spec change; a metadata-only update of a VM stored
// invalid (before the webhook) passes, so its finalizers can go.
func TestValidateVM(t *testing.T) {
	badTemplate := strings.Replace(strings.Replace(goodVM, "128Mi", "1Mi", 1), "- {name: root}", "- {name: root}\n          - {name: orphan}", 1)
	tests := []struct {
		name     string
		op       admissionv1.Operation
		obj, old string
		want     []string
	}{
		{name: "valid", op: admissionv1.Create, obj: goodVM},
		{name: "bad template", op: admissionv1.Create, obj: badTemplate, want: []string{
			"spec.template.spec.domain.devices.disks[1].name: FieldValueInvalid",
			"spec.template.spec.domain.memory.guest: FieldValueInvalid",
		}},
		{name: "no template", op: admissionv1.Create, obj: "metadata: {name: vm}\nspec: {runStrategy: Always}\n",
			want: []string{"spec.template: FieldValueRequired"}},
		{name: "guest memory as written: resources.requests.memory", op: admissionv1.Create,
			obj:  strings.Replace(goodVM, "memory: {guest: 128Mi}", "resources: {requests: {memory: 16Mi}}", 1),
			want: []string{"spec.template.spec.domain.resources.requests.memory: FieldValueInvalid"}},
		{name: "bad run strategy", op: admissionv1.Create, obj: strings.Replace(goodVM, "running: true", "runStrategy: Sometimes", 1),
			want: []string{"spec.runStrategy: FieldValueNotSupported"}},
		{name: "update to a bad template", op: admissionv1.Update, obj: badTemplate, old: goodVM, want: []string{
			"spec.template.spec.domain.devices.disks[1].name: FieldValueInvalid",
			"spec.template.spec.domain.memory.guest: FieldValueInvalid",
		}},
		{name: "metadata update of a VM stored invalid", op: admissionv1.Update, old: badTemplate,
			obj: strings.Replace(badTemplate, "namespace: ns}", "namespace: ns, finalizers: []}", 1)},
		{name: "delete", op: admissionv1.Delete, old: badTemplate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(t, PathValidateVM, request(t, vmKind, tt.op, "alice", tt.obj, tt.old))
			got := causes(resp)
			slices.Sort(got)
			if resp.Allowed != (len(tt.want) == 0) || !slices.Equal(got, tt.want) {
				t.Errorf("allowed %v, causes %q, want %q (%+v)", resp.Allowed, got, tt.want, resp.Result)
			}
		})
	}
}

// A VM with dataVolumeTemplates is refused, naming the field, where CDI's
// API is not installed; with CDI it passes, and an update that leaves the
// templates alone is not asked about.
func TestValidateVMDataVolumeTemplates(t *testing.T) {
	withDV := strings.Replace(strings.Replace(goodVM, "containerDisk: {image: example/os:1}", "dataVolume: {name: root-dv}", 1),
		"  running: true\n", "  running: true\n  dataVolumeTemplates:\n  - metadata: {name: root-dv}\n    spec: {source: {blank: {}}, storage: {}}\n", 1)
	for _, tt := range []struct {
		name      string
		installed bool
		op        admissionv1.Operation
		old       string
		want      []string
	}{
		{name: "CDI installed", installed: true, op: admissionv1.Create},
		{name: "CDI not installed", op: admissionv1.Create, want: []string{"spec.dataVolumeTemplates: FieldValueForbidden"}},
		{name: "update keeping the templates", op: admissionv1.Update, old: strings.Replace(withDV, "128Mi", "256Mi", 1)},
		{name: "update adding templates", op: admissionv1.Update, old: goodVM, want: []string{"spec.dataVolumeTemplates: FieldValueForbidden"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			asked := false
			c := Config{CDIInstalled: func(context.Context) (bool, error) { asked = true; return tt.installed, nil }}.withDefaults()
			resp := c.validateVM(request(t, vmKind, tt.op, "alice", withDV, tt.old))
			got := causes(resp)
			if resp.Allowed != (len(tt.want) == 0) || !slices.Equal(got, tt.want) {
				t.Errorf("allowed %v, causes %q, want %q (%+v)", resp.Allowed, got, tt.want, resp.Result)
			}
			if tt.name == "update keeping the templates" && asked {
				t.Error("asked about CDI for an update that kept the templates")
			}
		})
	}
}
