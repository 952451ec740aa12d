package admission

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"
)

// request builds an AdmissionRequest from YAML objects ("" for none).
func request(t *testing.T, kind metav1.GroupVersionKind, op admissionv1.Operation, user, obj, old string) *admissionv1.AdmissionRequest {
	t.Helper()
	raw := func(y string) runtime.RawExtension {
		if y == "" {
			return runtime.RawExtension{}
		}
		j, err := yaml.YAMLToJSON([]byte(y))
		if err != nil {
			t.Fatal(err)
		}
		return runtime.RawExtension{Raw: j}
	}
	return &admissionv1.AdmissionRequest{
		UID: types.UID("uid-1"), Kind: kind, Operation: op,
		Name: "vm", Namespace: "ns",
		UserInfo:  authnv1.UserInfo{Username: user},
		Object:    raw(obj),
		OldObject: raw(old),
	}
}

// post sends req through the handler at path as kube-apiserver would.
func post(t *testing.T, path string, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	t.Helper()
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  req,
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	hr := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	hr.Header.Set("Content-Type", "application/json")
	Handlers(Config{})[path].ServeHTTP(rec, hr)
	if rec.Code != http.StatusOK {
		t.Fatalf("HTTP %d: %s", rec.Code, rec.Body)
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &review); err != nil {
		t.Fatal(err)
	}
	if review.APIVersion != "admission.k8s.io/v1" || review.Kind != "AdmissionReview" || review.Response == nil {
		t.Fatalf("bad review: %s", rec.Body)
	}
	if review.Response.UID != req.UID {
		t.Fatalf("response UID %q, want %q", review.Response.UID, req.UID)
	}
	return review.Response
}

// causes are a denial's "field: type" pairs.
func causes(resp *admissionv1.AdmissionResponse) []string {
	if resp.Result == nil || resp.Result.Details == nil {
		return nil
	}
	var out []string
	for _, c := range resp.Result.Details.Causes {
		out = append(out, c.Field+": "+string(c.Type))
	}
	return out
}

const kemuController = "system:serviceaccount:kemu-system:kemu-controller"

// goodVMI is a small valid VMI as a user writes it.
const goodVMI = `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata:
  name: vm
  namespace: ns
spec:
  domain:
    memory:
      guest: 128Mi
    devices:
      disks:
      - name: root
  volumes:
  - name: root
    containerDisk:
      image: example/os:1
`

var podKind = metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}
