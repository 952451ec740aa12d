package deploytest

import (
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

// A tag is a string in the kustomization whatever it looks like: git describe
// --always gives an all-digit short hash now and then, and kustomize refuses
// a number where it wants a string.
func TestOverlayQuotesTag(t *testing.T) {
	for _, tag := range []string{"3958576", "1e5", "true", "v0.1.0-3-gabc", "null"} {
		t.Run(tag, func(t *testing.T) {
			dir := t.TempDir()
			if err := Overlay(dir, tag, Config{HostDiskDirs: "/srv/disks"}); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			var k struct {
				Images []struct {
					Name   string `json:"name"`
					NewTag string `json:"newTag"`
				} `json:"images"`
			}
			if err := yaml.Unmarshal(b, &k); err != nil {
				t.Fatalf("kustomization.yaml: %v", err)
			}
			if len(k.Images) != len(Images) {
				t.Fatalf("images: %d entries, want %d", len(k.Images), len(Images))
			}
			for _, im := range k.Images {
				if im.NewTag != tag {
					t.Errorf("%s: newTag %q, want %q", im.Name, im.NewTag, tag)
				}
			}
		})
	}
}
