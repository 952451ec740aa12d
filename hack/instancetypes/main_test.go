package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kemu-dev/kemu/api/manifest"
)

// deploy/instancetypes is what the tables make, and every object in it
// reads back valid with kemu's manifest reader.
func TestOverlayUpToDate(t *testing.T) {
	files, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join("..", "..", "deploy", "instancetypes", name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("deploy/instancetypes/%s is stale: run make generate", name)
		}
		if name == "kustomization.yaml" {
			continue
		}
		docs, err := manifest.Read(bytes.NewReader(want))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range docs {
			if len(d.Errors) > 0 {
				t.Errorf("%s %s: %v", name, d.Describe(), d.Errors)
			}
		}
	}
	k := string(files["kustomization.yaml"])
	for _, s := range []string{"series u1, o1, m1, n1 ", "#   cx1: spec.cpu.maxSockets, spec.ioThreadsPolicy"} {
		if !strings.Contains(k, s) {
			t.Errorf("kustomization.yaml lacks %q", s)
		}
	}
}
