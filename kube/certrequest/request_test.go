package certrequest

import (
	"testing"
	"time"
)

func TestRenewAt(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		life, want time.Duration
	}{{90 * time.Minute, time.Hour}, {90 * 24 * time.Hour, 60 * 24 * time.Hour}, {0, 0}} {
		if got := RenewAt(t0, t0.Add(tt.life)); !got.Equal(t0.Add(tt.want)) {
			t.Errorf("life %v: renew at %v, want %v", tt.life, got.Sub(t0), tt.want)
		}
	}
}
