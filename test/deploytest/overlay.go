// Package deploytest installs kemu's deploy/ on test/cluster's node: a
// kustomize overlay for what that node lacks, shared by the deploy and e2e
// suites.
package deploytest

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"

	"github.com/kemu-dev/kemu/test/cluster"
)

// Ports are the host ports the overlay gave the node agent and controller.
type Ports struct{ Health, Metrics int }

// Overlay writes dir/kustomization.yaml over <repo root>/deploy: the node
// agent's kubelet root is c's and its state lives in c's folder; the node
// agent and the controller use host networking on free ports and reach the
// API server directly, since the test cluster has no kube-proxy. tag, when
// not "", retags the three kemu images (kustomize images:, which also
// rewrites the launcher image in kemu-config).
func Overlay(dir string, c *cluster.Cluster, tag string) (Ports, error) {
	return OverlayWith(dir, c, tag, Config{})
}

// Config is kemu-config for the overlay; zero fields keep deploy/'s values.
type Config struct {
	// HostDiskDirs is kemu-config hostDiskDirs.
	HostDiskDirs string
}

// OverlayWith is Overlay with kemu-config values.
func OverlayWith(dir string, c *cluster.Cluster, tag string, cfg Config) (Ports, error) {
	root, err := cluster.RepoRoot()
	if err != nil {
		return Ports{}, err
	}
	rel, err := filepath.Rel(dir, filepath.Join(root, "deploy"))
	if err != nil {
		return Ports{}, err
	}
	u, err := url.Parse(c.Host)
	if err != nil {
		return Ports{}, err
	}
	var p Ports
	if p.Health, err = FreePort(); err != nil {
		return p, err
	}
	if p.Metrics, err = FreePort(); err != nil {
		return p, err
	}
	hostNet := func(argIndex int, arg string, port int) string {
		return fmt.Sprintf(`
      - {op: add, path: /spec/template/spec/hostNetwork, value: true}
      - {op: replace, path: /spec/template/spec/containers/0/args/%d, value: "%s"}
      - {op: replace, path: /spec/template/spec/containers/0/ports/0/containerPort, value: %d}
      - {op: add, path: /spec/template/spec/containers/0/env/-, value: {name: KUBERNETES_SERVICE_HOST, value: "%s"}}
      - {op: add, path: /spec/template/spec/containers/0/env/-, value: {name: KUBERNETES_SERVICE_PORT, value: "%s"}}`,
			argIndex, arg, port, u.Hostname(), u.Port())
	}
	images := ""
	if tag != "" {
		images = fmt.Sprintf(`images:
  - name: kemu.local/kemu-controller
    newTag: %[1]q
  - name: kemu.local/kemu-nodeagent
    newTag: %[1]q
  - name: kemu.local/kemu-launcher
    newTag: %[1]q
`, tag)
	}
	k := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %s
%spatches:
  - target: {kind: DaemonSet, name: kemu-nodeagent}
    patch: |
      apiVersion: apps/v1
      kind: DaemonSet
      metadata: {name: kemu-nodeagent}
      spec:
        template:
          spec:
            volumes:
              - name: kubelet-root
                hostPath: {path: %s, type: Directory}
              - name: state
                hostPath: {path: %s, type: DirectoryOrCreate}
  - target: {kind: DaemonSet, name: kemu-nodeagent}
    patch: |%s
  - target: {kind: Deployment, name: kemu-controller}
    patch: |%s
%s`, rel, images, c.KubeletRootDir, filepath.Join(c.Dir, "kemu-state"),
		hostNet(1, fmt.Sprintf("--health-addr=:%d", p.Health), p.Health),
		hostNet(3, fmt.Sprintf("--metrics-addr=:%d", p.Metrics), p.Metrics), configPatch(cfg))
	return p, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644)
}

// FreePort is a TCP port nothing listens on right now.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func configPatch(cfg Config) string {
	if cfg.HostDiskDirs == "" {
		return ""
	}
	return fmt.Sprintf(`  - target: {kind: ConfigMap, name: kemu-config}
    patch: |
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: kemu-config}
      data: {hostDiskDirs: %q}
`, cfg.HostDiskDirs)
}
