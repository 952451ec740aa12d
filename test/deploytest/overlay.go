// Package deploytest installs kemu's deploy/ on test/cluster's nodes: a
// kustomize overlay shared by the deploy and e2e suites. The nodes look
// like a real cluster's to deploy/ (kubelet root /var/lib/kubelet, the
// "kubernetes" Service reachable from Pods), so the overlay only retags the
// images and sets kemu-config; the e2e suite's is over ThrowawayOverlay,
// the committed overlay make demo-cluster installs.
package deploytest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kemu-dev/kemu/test/cluster"
)

// Images are kemu's images as make images writes them
// (_out/images/<name>.oci.tar, kemu.local/<name>), each in deploy/.
var Images = []string{"kemu-launcher", "kemu-controller", "kemu-api", "kemu-nodeagent"}

// Archive is image's OCI archive's file name.
func Archive(image string) string { return image + ".oci.tar" }

// ThrowawayOverlay is the committed overlay for hack/cluster.sh's
// throw-away cluster (relative to the repository's root), which
// hack/demo-cluster.sh applies.
const ThrowawayOverlay = "deploy/overlays/throwaway"

// Config is what the overlay changes beyond the images; zero fields keep
// the base's values.
type Config struct {
	// Base is the kustomization the overlay is over, relative to the
	// repository's root: "" is deploy (kubectl apply -k deploy/).
	Base string
	// HostDiskDirs is kemu-config hostDiskDirs.
	HostDiskDirs string
	// ControllerArgs and NodeAgentArgs are added to kemu-controller's and
	// kemu-nodeagent's arguments.
	ControllerArgs, NodeAgentArgs []string
}

// Overlay writes dir/kustomization.yaml over cfg.Base. tag, when
// not "", retags kemu's Images (kustomize images:, which also
// rewrites the launcher image in kemu-config).
func Overlay(dir, tag string, cfg Config) error {
	root, err := cluster.RepoRoot()
	if err != nil {
		return err
	}
	base := cfg.Base
	if base == "" {
		base = "deploy"
	}
	rel, err := filepath.Rel(dir, filepath.Join(root, base))
	if err != nil {
		return err
	}
	images := ""
	if tag != "" {
		images = "images:\n"
		for _, img := range Images {
			images += fmt.Sprintf("  - name: kemu.local/%s\n    newTag: %q\n", img, tag)
		}
	}
	k := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %s
%s%s`, rel, images, patches(cfg))
	return os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644)
}

func patches(cfg Config) string {
	var b strings.Builder
	var data []string
	if cfg.HostDiskDirs != "" {
		data = append(data, fmt.Sprintf("hostDiskDirs: %q", cfg.HostDiskDirs))
	}
	if len(data) > 0 {
		fmt.Fprintf(&b, `  - target: {kind: ConfigMap, name: kemu-config}
    patch: |
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: kemu-config}
      data: {%s}
`, strings.Join(data, ", "))
	}
	for _, p := range []struct {
		kind, name string
		args       []string
	}{{"Deployment", "kemu-controller", cfg.ControllerArgs}, {"DaemonSet", "kemu-nodeagent", cfg.NodeAgentArgs}} {
		if len(p.args) == 0 {
			continue
		}
		fmt.Fprintf(&b, "  - target: {kind: %s, name: %s}\n    patch: |\n", p.kind, p.name)
		for _, a := range p.args {
			q, _ := json.Marshal(a)
			fmt.Fprintf(&b, "      - {op: add, path: /spec/template/spec/containers/0/args/-, value: %s}\n", q)
		}
	}
	if b.Len() == 0 {
		return ""
	}
	return "patches:\n" + b.String()
}
