package nodeapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestHTTPStatus(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want int
	}{
		{status.Error(codes.FailedPrecondition, "no graphics device"), http.StatusConflict},
		{status.Error(codes.Unavailable, "QEMU is gone"), http.StatusServiceUnavailable},
		{status.Error(codes.DeadlineExceeded, "guest agent"), http.StatusGatewayTimeout},
		{fmt.Errorf("call: %w", context.DeadlineExceeded), http.StatusGatewayTimeout},
		{status.Error(codes.Unimplemented, "GuestUsers"), http.StatusNotImplemented},
		{status.Error(codes.Internal, "agent said no"), http.StatusBadGateway},
		{errors.New("transport"), http.StatusBadGateway},
	} {
		if got, _ := httpStatus(tt.err); got != tt.want {
			t.Errorf("%v: %d, want %d", tt.err, got, tt.want)
		}
	}
}

func TestHeaderHasToken(t *testing.T) {
	for _, tt := range []struct {
		values []string
		want   bool
	}{
		{[]string{"Upgrade"}, true},
		{[]string{"keep-alive, upgrade"}, true},
		{[]string{"keep-alive", "UPGRADE"}, true},
		{[]string{"keep-alive"}, false},
		{[]string{"upgraded"}, false},
		{nil, false},
	} {
		h := http.Header{"Connection": tt.values}
		if got := headerHasToken(h, "Connection", "upgrade"); got != tt.want {
			t.Errorf("%q: %v, want %v", tt.values, got, tt.want)
		}
	}
}
