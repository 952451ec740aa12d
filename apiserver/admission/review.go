package admission

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// MaxRequestBytes bounds an AdmissionReview's body: kube-apiserver's own
// limit for a request body (3 MiB), and an AdmissionReview of an update
// carries the object twice.
const MaxRequestBytes = 3 << 20

// admitFunc judges one request. It returns a response without UID; a nil
// Result with Allowed false is not allowed (use deny).
type admitFunc func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse

// webhook serves one admission webhook over HTTP.
type webhook struct {
	name  string
	admit admitFunc
}

var reviewGVK = admissionv1.SchemeGroupVersion.WithKind("AdmissionReview")

func (w *webhook) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		rw.Header().Set("Allow", http.MethodPost)
		http.Error(rw, "admission reviews are POSTed", http.StatusMethodNotAllowed)
		return
	}
	if ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || ct != "application/json" {
		http.Error(rw, fmt.Sprintf("Content-Type %q: want application/json", r.Header.Get("Content-Type")),
			http.StatusUnsupportedMediaType)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, MaxRequestBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(rw, fmt.Sprintf("request body larger than %d bytes", MaxRequestBytes), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(rw, "reading request: "+err.Error(), http.StatusBadRequest)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil {
		http.Error(rw, "decoding AdmissionReview: "+err.Error(), http.StatusBadRequest)
		return
	}
	if gvk := review.GroupVersionKind(); gvk != reviewGVK {
		http.Error(rw, fmt.Sprintf("got %s, want %s", gvk, reviewGVK), http.StatusBadRequest)
		return
	}
	if review.Request == nil {
		http.Error(rw, "AdmissionReview without a request", http.StatusBadRequest)
		return
	}
	req := review.Request
	resp := w.admit(req)
	resp.UID = req.UID
	if !resp.Allowed {
		msg := ""
		if resp.Result != nil {
			msg = resp.Result.Message
		}
		klog.V(2).InfoS("Admission denied", "webhook", w.name, "operation", req.Operation,
			"kind", req.Kind.Kind, "object", klog.KRef(req.Namespace, req.Name), "user", req.UserInfo.Username, "reason", msg)
	}
	out, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: reviewGVK.GroupVersion().String(), Kind: reviewGVK.Kind},
		Response: resp,
	})
	if err != nil {
		klog.ErrorS(err, "Encoding AdmissionReview", "webhook", w.name)
		http.Error(rw, "encoding response", http.StatusInternalServerError)
		return
	}
	rw.Header().Set("Content-Type", "application/json")
	if _, err := rw.Write(out); err != nil {
		klog.V(2).InfoS("Writing admission response", "webhook", w.name, "err", err)
	}
}

func allow() *admissionv1.AdmissionResponse { return &admissionv1.AdmissionResponse{Allowed: true} }

// deny refuses with err's status (an apierrors.APIStatus keeps its code,
// reason and causes; anything else is a 400).
func deny(err error) *admissionv1.AdmissionResponse {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		status = apierrors.NewBadRequest(err.Error())
	}
	s := status.Status()
	return &admissionv1.AdmissionResponse{Allowed: false, Result: &s}
}
