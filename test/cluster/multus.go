package cluster

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// EnvMultusBinary names Multus's thin plugin binary (Options.MultusBinary).
const EnvMultusBinary = "KEMU_MULTUS_BIN"

// NetworkAttachmentCRD is the name of Multus's NetworkAttachmentDefinition CRD.
const NetworkAttachmentCRD = "network-attachment-definitions.k8s.cni.cncf.io"

//go:embed testdata/network-attachment-definition-crd.yaml
var networkAttachmentCRD string

var networkAttachments = schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1", Resource: "network-attachment-definitions"}

// InstallNetworkAttachmentCRD installs Multus's NetworkAttachmentDefinition
// CRD and waits until it is Established.
func (c *Cluster) InstallNetworkAttachmentCRD() error {
	if _, stderr, err := c.KubectlInput(networkAttachmentCRD, "apply", "-f", "-"); err != nil {
		return fmt.Errorf("installing the NetworkAttachmentDefinition CRD: %w: %s", err, stderr)
	}
	if _, stderr, err := c.Kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/"+NetworkAttachmentCRD); err != nil {
		return fmt.Errorf("waiting for the NetworkAttachmentDefinition CRD: %w: %s", err, stderr)
	}
	return nil
}

// CreateNetworkAttachment creates a NetworkAttachmentDefinition whose
// spec.config is the CNI configuration cniConfig (marshalled to JSON).
func (c *Cluster) CreateNetworkAttachment(ctx context.Context, namespace, name string, cniConfig map[string]any) error {
	b, err := json.Marshal(cniConfig)
	if err != nil {
		return err
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
		"metadata": map[string]any{"name": name, "namespace": namespace},
		"spec":     map[string]any{"config": string(b)},
	}}
	dc, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		return err
	}
	if _, err := dc.Resource(networkAttachments).Namespace(namespace).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("NetworkAttachmentDefinition %s/%s: %w", namespace, name, err)
	}
	return nil
}

// multusBinary finds Multus's thin plugin.
func multusBinary(explicit string) (string, error) {
	bin := explicit
	if bin == "" {
		bin = os.Getenv(EnvMultusBinary)
	}
	if bin == "" {
		root, err := RepoRoot()
		if err != nil {
			return "", err
		}
		bin = filepath.Join(root, "_out", "multus", "bin", "multus")
	}
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("cluster: Multus's thin plugin: %w (run: bash hack/multus/build.sh, or make k8s)", err)
	}
	return filepath.Abs(bin)
}

// setupMultus gives the node a CNI bin folder of its own (Debian's plugins
// and Multus) and puts Multus's conf first in its conf folder, delegating
// the cluster network to the node's bridge conf (so Pods keep their
// network, names and addresses) and reading Pods and
// NetworkAttachmentDefinitions with the cluster's kubeconfig. It returns
// the bin folder for containerd.
func (n *Node) setupMultus(opts Options) (string, error) {
	bin, err := multusBinary(opts.MultusBinary)
	if err != nil {
		return "", err
	}
	binDir := filepath.Join(n.Dir, "cni", "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return "", fmt.Errorf("cluster: node %s: %w", n.Name, err)
	}
	plugins, err := os.ReadDir(cniBinDir)
	if err != nil {
		return "", fmt.Errorf("cluster: node %s: CNI plugins: %w", n.Name, err)
	}
	link := func(target, name string) error {
		p := filepath.Join(binDir, name)
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			return err
		}
		return os.Symlink(target, p)
	}
	for _, p := range plugins {
		if err := link(filepath.Join(cniBinDir, p.Name()), p.Name()); err != nil {
			return "", fmt.Errorf("cluster: node %s: %w", n.Name, err)
		}
	}
	if err := link(bin, "multus"); err != nil {
		return "", fmt.Errorf("cluster: node %s: %w", n.Name, err)
	}
	confDir := filepath.Join(n.Dir, "cni", "net.d")
	conf, _ := json.MarshalIndent(map[string]any{
		"cniVersion":     "0.4.0",
		"name":           "multus-cni-network",
		"type":           "multus",
		"kubeconfig":     n.c.Kubeconfig,
		"clusterNetwork": n.podNetworkConf(true),
		"confDir":        confDir,
		"cniDir":         "/var/lib/cni/multus", // the node's own /var/lib
		"binDir":         binDir,
		"logFile":        n.LogPath("multus"),
		"logLevel":       "verbose",
	}, "", "  ")
	if err := os.WriteFile(filepath.Join(confDir, "00-multus.conf"), conf, 0o644); err != nil {
		return "", fmt.Errorf("cluster: node %s: %w", n.Name, err)
	}
	return binDir, nil
}
