package admission

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
)

// Every webhook refuses what is not an AdmissionReview POSTed as JSON with
// a clean HTTP error, and never panics on garbage.
func TestTransport(t *testing.T) {
	valid := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"kemu.dev","version":"v1alpha1","kind":"VirtualMachineInstance"},"operation":"CREATE","object":{}}}`
	tests := []struct {
		name, method, ctype, body string
		want                      int
	}{
		{name: "GET", method: http.MethodGet, ctype: "application/json", body: valid, want: http.StatusMethodNotAllowed},
		{name: "no content type", method: http.MethodPost, body: valid, want: http.StatusUnsupportedMediaType},
		{name: "yaml", method: http.MethodPost, ctype: "application/yaml", body: valid, want: http.StatusUnsupportedMediaType},
		{name: "json with charset", method: http.MethodPost, ctype: "application/json; charset=utf-8", body: valid, want: http.StatusOK},
		{name: "too large", method: http.MethodPost, ctype: "application/json", body: `{"x":"` + strings.Repeat("a", MaxRequestBytes) + `"}`, want: http.StatusRequestEntityTooLarge},
		{name: "empty", method: http.MethodPost, ctype: "application/json", want: http.StatusBadRequest},
		{name: "not json", method: http.MethodPost, ctype: "application/json", body: "\x00\xff garbage", want: http.StatusBadRequest},
		{name: "truncated", method: http.MethodPost, ctype: "application/json", body: valid[:len(valid)/2], want: http.StatusBadRequest},
		{name: "array", method: http.MethodPost, ctype: "application/json", body: `[1,2]`, want: http.StatusBadRequest},
		{name: "null", method: http.MethodPost, ctype: "application/json", body: `null`, want: http.StatusBadRequest},
		{name: "v1beta1 review", method: http.MethodPost, ctype: "application/json", body: strings.Replace(valid, "admission.k8s.io/v1", "admission.k8s.io/v1beta1", 1), want: http.StatusBadRequest},
		{name: "other kind", method: http.MethodPost, ctype: "application/json", body: strings.Replace(valid, `"AdmissionReview"`, `"Pod"`, 1), want: http.StatusBadRequest},
		{name: "no request", method: http.MethodPost, ctype: "application/json", body: `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, want: http.StatusBadRequest},
		{name: "request null", method: http.MethodPost, ctype: "application/json", body: `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":null}`, want: http.StatusBadRequest},
		{name: "request wrong type", method: http.MethodPost, ctype: "application/json", body: `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":"x"}`, want: http.StatusBadRequest},
	}
	for path, h := range Handlers(Config{}) {
		for _, tt := range tests {
			t.Run(path+"/"+tt.name, func(t *testing.T) {
				rec := httptest.NewRecorder()
				r := httptest.NewRequest(tt.method, path, strings.NewReader(tt.body))
				if tt.ctype != "" {
					r.Header.Set("Content-Type", tt.ctype)
				}
				h.ServeHTTP(rec, r)
				if rec.Code != tt.want {
					t.Errorf("HTTP %d, want %d: %s", rec.Code, tt.want, rec.Body)
				}
			})
		}
	}
}

// Hostile requests inside a well-formed review are answered with a review
// (allowed or denied with a reason), never a panic or a 500.
func TestHostileRequests(t *testing.T) {
	objects := []string{
		`null`, `{}`, `[]`, `"x"`, `1`, `{"spec":null}`, `{"spec":[]}`, `{"spec":"x"}`,
		`{"metadata":"x"}`, `{"metadata":{"annotations":[]}}`,
		`{"spec":{"domain":null,"volumes":null}}`, `{"spec":{"domain":{"devices":{"disks":[null,{}]}}}}`,
		`{"spec":{"domain":{"memory":{"guest":"nonsense"}}}}`, `{"spec":{"domain":{"memory":{"guest":-1}}}}`,
		`{"spec":{"domain":{"cpu":{"sockets":-1,"cores":4294967296}}}}`, `{"spec":{"template":null}}`,
		`{"spec":{"template":{"spec":{"domain":{"devices":{"disks":[{"bootOrder":0}]}}}}}}`,
		`{"spec":{"vmiName":null}}`, `{"spec":{"volumes":[{"name":"a","emptyDisk":{"capacity":"1e100"}}]}}`,
	}
	ops := []admissionv1.Operation{admissionv1.Create, admissionv1.Update, admissionv1.Delete, admissionv1.Connect, "BOGUS", ""}
	kinds := []string{"VirtualMachineInstance", "VirtualMachine", "VirtualMachineInstanceMigration", "Pod", ""}
	for path, h := range Handlers(Config{}) {
		for _, kind := range kinds {
			for _, op := range ops {
				for _, obj := range objects {
					for _, old := range []string{"", obj, `{}`} {
						req := map[string]any{
							"uid":       "u",
							"kind":      map[string]string{"group": "kemu.dev", "version": "v1alpha1", "kind": kind},
							"operation": op,
							"object":    json.RawMessage(obj),
						}
						if old != "" {
							req["oldObject"] = json.RawMessage(old)
						}
						body, _ := json.Marshal(map[string]any{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req})
						rec := httptest.NewRecorder()
						r := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
						r.Header.Set("Content-Type", "application/json")
						h.ServeHTTP(rec, r)
						if rec.Code != http.StatusOK {
							// A request whose object is not JSON an object
							// can hold is refused while decoding the review.
							if rec.Code != http.StatusBadRequest {
								t.Errorf("%s %s %s %s: HTTP %d: %s", path, kind, op, obj, rec.Code, rec.Body)
							}
							continue
						}
						var review admissionv1.AdmissionReview
						if err := json.Unmarshal(rec.Body.Bytes(), &review); err != nil || review.Response == nil || review.Response.UID != "u" {
							t.Errorf("%s %s %s %s: bad review %s", path, kind, op, obj, rec.Body)
							continue
						}
						if resp := review.Response; !resp.Allowed && (resp.Result == nil || resp.Result.Message == "") {
							t.Errorf("%s %s %s %s: denied without a message", path, kind, op, obj)
						}
					}
				}
			}
		}
	}
}

// A webhook refuses a request for a kind it does not admit.
func TestWrongKind(t *testing.T) {
	for path := range Handlers(Config{}) {
		resp := post(t, path, request(t, podKind, admissionv1.Create, "u", `{"metadata":{"name":"p"}}`, ""))
		if resp.Allowed || resp.Result.Code != http.StatusBadRequest || !strings.Contains(resp.Result.Message, "Pod") {
			t.Errorf("%s: %+v", path, resp.Result)
		}
	}
}
