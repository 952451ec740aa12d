//go:build cluster

package cluster_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/kemu-dev/kemu/test/cluster"
)

// deploy/instancetypes, kemu's optional overlay of common instance types
// and preferences, applies with kubectl apply -k on the real API server
// (the CRDs' schemas, CEL rules included, accept every object) and each
// object reads back.
func TestInstancetypesOverlayApplies(t *testing.T) {
	installCRDs(t)
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "deploy", "instancetypes")
	// The objects are cluster-wide: other tests of the shared cluster
	// create some of the same names (api/manifest's testdata).
	t.Cleanup(func() {
		if _, stderr, err := shared.Kubectl("delete", "-k", dir, "--ignore-not-found", "--wait"); err != nil {
			t.Errorf("kubectl delete -k deploy/instancetypes: %v\n%s", err, stderr)
		}
	})
	out, stderr, err := shared.Kubectl("apply", "-k", dir)
	if err != nil {
		t.Fatalf("kubectl apply -k deploy/instancetypes: %v\n%s%s", err, out, stderr)
	}
	for _, kind := range []string{"virtualmachineclusterinstancetype", "virtualmachineclusterpreference"} {
		applied := strings.Count(out, kind+".instancetype.kemu.dev/")
		got, _, err := shared.Kubectl("get", kind+"s.instancetype.kemu.dev", "-o", "name")
		if err != nil {
			t.Fatal(err)
		}
		if applied == 0 || strings.Count(got, kind+".instancetype.kemu.dev/") != applied {
			t.Errorf("%s: %d applied, the API server has:\n%s", kind, applied, got)
		}
	}
	if !strings.Contains(out, "virtualmachineclusterinstancetype.instancetype.kemu.dev/u1.medium") ||
		!strings.Contains(out, "virtualmachineclusterpreference.instancetype.kemu.dev/fedora") {
		t.Errorf("u1.medium or fedora missing:\n%s", out)
	}
}
