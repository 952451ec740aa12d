package cluster

import (
	"context"
	"testing"
)

// StartWithCRDs starts a control plane for test t (Logf t.Logf, stopped
// when t ends) with kemu's CRDs installed; a failure fails t, pointing at
// make k8s.
func StartWithCRDs(ctx context.Context, t testing.TB) *Cluster {
	t.Helper()
	c, err := Start(ctx, Options{Logf: t.Logf})
	if err != nil {
		t.Fatalf("%v (run make k8s)", err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	if err := c.InstallCRDs(); err != nil {
		t.Fatal(err)
	}
	return c
}
