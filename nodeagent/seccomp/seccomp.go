// Package seccomp installs kemu's seccomp profile for launcher Pods with a
// passt-bound interface (launcherpod.PasstSeccompProfile) on the node, where
// the kubelet finds Localhost profiles: <kubelet-root>/seccomp/.
//
// The profile is containerd's default (RuntimeDefault) for every capability
// a compute container may hold, plus pivot_root(2): passt sandboxes itself
// in an empty mount namespace with pivot_root, which containerd's default
// refuses to every container. It is generated (zz_generated.profile.go) by
// hack/containerd/seccompgen from the containerd the test cluster runs.
package seccomp

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/kemu-dev/kemu/api/launcherpod"
)

// Capabilities are launcherpod.AllCapabilities as CAP_ names, the set the
// profile is made for.
func Capabilities() []string {
	var caps []string
	for _, c := range launcherpod.AllCapabilities() {
		caps = append(caps, "CAP_"+string(c))
	}
	return caps
}

// Source names where the profile comes from ("containerd v2.4.2").
func Source() string { return "containerd " + generatedFrom }

// Profile is the profile's JSON.
func Profile() []byte { return []byte(profileJSON) }

// Install writes the profile to <kubeletRoot>/seccomp/<PasstSeccompProfile>
// (directories 0755, the file 0644, replaced atomically; unchanged content
// is not rewritten). The kubelet root is the node's own (trusted).
func Install(kubeletRoot string) (string, error) {
	if !slices.Equal(generatedFor, Capabilities()) {
		return "", fmt.Errorf("seccomp: the generated profile is for %v, not the launcher's capabilities %v (run make generate)", generatedFor, Capabilities())
	}
	path := filepath.Join(kubeletRoot, launcherpod.SeccompDir, launcherpod.PasstSeccompProfile)
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, Profile()) {
		return path, nil
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("seccomp: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".launcher-passt-*.json")
	if err != nil {
		return "", fmt.Errorf("seccomp: %w", err)
	}
	defer os.Remove(tmp.Name()) //nolint:errcheck // gone after the rename
	if _, err := tmp.Write(Profile()); err != nil {
		tmp.Close()
		return "", fmt.Errorf("seccomp: writing %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return "", fmt.Errorf("seccomp: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("seccomp: writing %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("seccomp: %w", err)
	}
	return path, nil
}
