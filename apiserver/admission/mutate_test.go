package admission

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// The mutator's patch, applied as kube-apiserver applies it, stores exactly
// what SetVirtualMachineInstanceDefaults makes of the VMI and the VMI
// finalizer (the user's finalizers kept), touches only spec and the
// finalizers, and is empty for a VMI that already carries both.
func TestMutateVMI(t *testing.T) {
	tests := []struct {
		name, obj string
		reqName   string // the request's name (generateName resolved)
	}{
		{name: "minimal", obj: goodVMI},
		{name: "a finalizer of the user's", obj: strings.Replace(goodVMI, "  namespace: ns\n", "  namespace: ns\n  finalizers: [example.com/keep]\n", 1)},
		{name: "no name in object", obj: strings.Replace(goodVMI, "  name: vm\n  namespace: ns\n", "  generateName: v-\n", 1), reqName: "v-abcde"},
		{name: "cdrom, interface, ports", obj: `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: vm, namespace: ns}
spec:
  domain:
    resources: {requests: {memory: 256Mi}}
    devices:
      disks:
      - {name: iso, cdrom: {}}
      interfaces:
      - {name: default, ports: [{port: 22}]}
  volumes:
  - {name: iso, containerDisk: {image: example/iso}}
  - {name: scratch, emptyDisk: {capacity: 1Gi}}
  networks:
  - {name: default, pod: {}}
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := request(t, vmiKind, admissionv1.Create, "alice", tt.obj, "")
			if tt.reqName != "" {
				req.Name = tt.reqName
			}
			resp := post(t, PathMutateVMI, req)
			if !resp.Allowed || resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
				t.Fatalf("response %+v", resp)
			}
			var ops []map[string]any
			if err := json.Unmarshal(resp.Patch, &ops); err != nil {
				t.Fatal(err)
			}
			for _, op := range ops {
				if p, _ := op["path"].(string); p != "/spec" && !strings.HasPrefix(p, "/spec/") && !strings.HasPrefix(p, "/metadata/finalizers") {
					t.Errorf("patch touches %s", p)
				}
			}
			patch, err := jsonpatch.DecodePatch(resp.Patch)
			if err != nil {
				t.Fatal(err)
			}
			patched, err := patch.Apply(req.Object.Raw)
			if err != nil {
				t.Fatalf("applying %s: %v", resp.Patch, err)
			}
			var got, want v1.VirtualMachineInstance
			if err := json.Unmarshal(patched, &got); err != nil {
				t.Fatal(err)
			}
			if err := yaml.Unmarshal([]byte(tt.obj), &want); err != nil {
				t.Fatal(err)
			}
			want.Namespace, want.Name = "ns", req.Name
			v1.SetVirtualMachineInstanceDefaults(&want)
			if !apiequality.Semantic.DeepEqual(got.Spec, want.Spec) {
				t.Errorf("stored spec\n%+v\nwant\n%+v", got.Spec, want.Spec)
			}
			if wantFin := append(want.Finalizers, v1.VMIFinalizer); !slices.Equal(got.Finalizers, wantFin) {
				t.Errorf("finalizers %v, want %v", got.Finalizers, wantFin)
			}
			if got.Spec.Domain.Firmware == nil || got.Spec.Domain.Firmware.UUID != v1.DeriveFirmwareUUID("ns", req.Name) {
				t.Errorf("firmware %+v, want the UUID derived from ns/%s", got.Spec.Domain.Firmware, req.Name)
			}

			// Defaulted already: nothing to patch.
			again := request(t, vmiKind, admissionv1.Create, "alice", "", "")
			again.Name, again.Object.Raw = req.Name, patched
			if resp := post(t, PathMutateVMI, again); !resp.Allowed || resp.Patch != nil {
				t.Errorf("second pass patched %s", resp.Patch)
			}
		})
	}
}

// Only CREATE is mutated; an object that does not decode is let through for
// the CRD schema to refuse.
func TestMutateVMIPassesThrough(t *testing.T) {
	for _, tt := range []struct {
		name string
		req  *admissionv1.AdmissionRequest
	}{
		{"update", request(t, vmiKind, admissionv1.Update, "alice", goodVMI, goodVMI)},
		{"delete", request(t, vmiKind, admissionv1.Delete, "alice", "", goodVMI)},
		{"undecodable", request(t, vmiKind, admissionv1.Create, "alice", `{"spec":{"domain":{"cpu":{"cores":"many"}}}}`, "")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if resp := post(t, PathMutateVMI, tt.req); !resp.Allowed || resp.Patch != nil {
				t.Errorf("response %+v", resp)
			}
		})
	}
}

// The mutator refuses an invalid VMI itself, where what the user wrote is
// known: errors name the fields as written, not those defaulting filled in.
func TestMutateVMIRefusesAsWritten(t *testing.T) {
	tests := []struct {
		name, obj string
		want      []string
	}{
		{name: "no spec", obj: "apiVersion: kemu.dev/v1alpha1\nkind: VirtualMachineInstance\nmetadata: {name: vm}\n",
			want: []string{"spec.domain.memory.guest: FieldValueRequired"}},
		{name: "guest memory from requests.memory", obj: strings.Replace(goodVMI, "    memory:\n      guest: 128Mi\n", "    resources: {requests: {memory: 16Mi}}\n", 1),
			want: []string{"spec.domain.resources.requests.memory: FieldValueInvalid"}},
		{name: "a defaulted CD-ROM bus on a pc machine", obj: `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: vm, namespace: ns}
spec:
  domain:
    memory: {guest: 128Mi}
    machine: {type: pc}
    devices:
      disks:
      - {name: iso, cdrom: {}}
  volumes:
  - {name: iso, containerDisk: {image: example/iso:1}}
`, want: []string{"spec.domain.devices.disks[0].cdrom: FieldValueInvalid"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(goodVMI, "    memory:\n      guest: 128Mi\n") {
				t.Fatal("goodVMI changed: the test's replacement does not apply")
			}
			resp := post(t, PathMutateVMI, request(t, vmiKind, admissionv1.Create, "alice", tt.obj, ""))
			got := causes(resp)
			slices.Sort(got)
			if resp.Allowed || resp.Patch != nil || !slices.Equal(got, tt.want) {
				t.Errorf("allowed %v, causes %q, want %q (%+v)", resp.Allowed, got, tt.want, resp.Result)
			}
		})
	}
}
