package launcherpod

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// Multus's Pod annotations, as KubeVirt writes them on virt-launcher Pods:
// the controller renders them from the VMI's networks, and only the
// controller (a VMI's own annotations with these domains never reach the
// Pod: MultusAnnotationDomains).
const (
	// NetworksAnnotation lists the Pod's secondary networks (JSON, a list
	// of Multus network selection elements).
	NetworksAnnotation = "k8s.v1.cni.cncf.io/networks"
	// DefaultNetworkAnnotation replaces Multus's cluster network for the
	// Pod's primary interface ("name" or "namespace/name").
	DefaultNetworkAnnotation = "v1.multus-cni.io/default-network"
)

// MultusAnnotationDomains are the annotation domains Multus reads.
var MultusAnnotationDomains = []string{"cni.cncf.io", "multus-cni.io"}

// PrimaryPodInterface is the Pod's primary interface: the cluster network,
// or the default Multus network.
const PrimaryPodInterface = "eth0"

// PodInterfaceName is the Pod interface of a network, KubeVirt's hashed
// name scheme (KubeVirt ≥ 0.59): "pod" and the first 11 hex digits of the
// SHA-256 of the network's name for a secondary Multus network,
// PrimaryPodInterface for the pod network and the default Multus network.
func PodInterfaceName(n v1.Network) string {
	if n.Multus == nil || n.Multus.Default {
		return PrimaryPodInterface
	}
	sum := sha256.Sum256([]byte(n.Name))
	return "pod" + hex.EncodeToString(sum[:])[:11]
}

// NetworkAttachment splits networks[].multus.networkName into the
// NetworkAttachmentDefinition's namespace (the VMI's when not given) and
// name.
func NetworkAttachment(vmiNamespace, networkName string) (namespace, name string) {
	if ns, n, ok := strings.Cut(networkName, "/"); ok {
		return ns, n
	}
	return vmiNamespace, networkName
}
