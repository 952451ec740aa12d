package migrationca

import (
	"testing"
	"time"
)

func newTestCA(t testing.TB) *CA {
	t.Helper()
	ca, err := NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ca
}
