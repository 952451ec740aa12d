package nodeapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// writeError answers a refused or failed request with a metav1.Status
// (code, reason, message), as the Kubernetes API does.
func writeError(w http.ResponseWriter, code int, reason metav1.StatusReason, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(&metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Code: int32(code), Reason: reason, Message: message,
	})
}

// httpStatus maps a launcher RPC's error to an HTTP status: a refused
// precondition (no graphics device, a domain state that does not allow
// it) 409, QEMU or the guest agent unavailable 503, a timeout 504, an RPC
// the launcher does not serve 501, anything else 502.
func httpStatus(err error) (int, metav1.StatusReason) {
	if errors.Is(err, context.DeadlineExceeded) {
		return http.StatusGatewayTimeout, metav1.StatusReasonTimeout
	}
	switch status.Code(err) {
	case codes.FailedPrecondition, codes.Aborted:
		return http.StatusConflict, metav1.StatusReasonConflict
	case codes.Unavailable:
		return http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout, metav1.StatusReasonTimeout
	case codes.Unimplemented:
		return http.StatusNotImplemented, metav1.StatusReasonMethodNotAllowed
	case codes.NotFound:
		return http.StatusNotFound, metav1.StatusReasonNotFound
	case codes.Canceled:
		return http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable
	}
	return http.StatusBadGateway, metav1.StatusReasonInternalError
}

// writeRPCError answers with the launcher RPC's error.
func writeRPCError(w http.ResponseWriter, what string, err error) {
	code, reason := httpStatus(err)
	msg := err.Error()
	if st, ok := status.FromError(err); ok {
		msg = st.Message()
	}
	writeError(w, code, reason, what+": "+msg)
}
