package launcherpod

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
)

// Backend storage (KubeVirt's backend-storage): the PVC on which a VM's
// persistent TPM keeps its state (domain.devices.tpm.persistent: true).
// The VMI controller creates it before the launcher Pod, owned by the
// VMI's owner (the VirtualMachine: deleted with it) or by a bare VMI
// itself; the launcher Pod mounts it whole at VMStateDir, and the launcher
// keeps swtpm's state in its SwtpmStateSubdir.
const (
	// BackendStoragePrefix starts the claim's name,
	// persistent-state-for-<vm>, and is the key of its label naming the
	// VM (KubeVirt's PVCPrefix, name and label).
	BackendStoragePrefix = "persistent-state-for"
	// BackendStorageSize is the claim's request (KubeVirt's PVCSize).
	BackendStorageSize = "10Mi"
	// VMStateVolume is the Pod's volume of the claim (KubeVirt's name).
	VMStateVolume = "vm-state"
	// VMStateDir is where the compute container mounts it.
	VMStateDir = "/var/run/kemu/vm-state"
	// SwtpmStateSubdir is the TPM's state directory in it (KubeVirt's
	// subPath name).
	SwtpmStateSubdir = "swtpm"
)

// BackendStoragePVCName is the backend storage claim of the VM (or bare
// VMI) named vmName: persistent-state-for-<vmName> (KubeVirt's legacy
// name, which KubeVirt still finds), fixed, so that a second create fails
// with AlreadyExists. A name too long for a claim (a DNS-1123 subdomain,
// 253) keeps its first 221 characters (trailing '-' and '.' trimmed),
// "-" and 10 hex digits of the name's SHA-256.
func BackendStoragePVCName(vmName string) string {
	name := BackendStoragePrefix + "-" + vmName
	if len(name) <= utilvalidation.DNS1123SubdomainMaxLength {
		return name
	}
	sum := sha256.Sum256([]byte(vmName))
	keep := utilvalidation.DNS1123SubdomainMaxLength - len(BackendStoragePrefix) - 2*len("-") - 10
	return BackendStoragePrefix + "-" + strings.TrimRight(vmName[:keep], "-.") + "-" + hex.EncodeToString(sum[:])[:10]
}

// BackendStorageLabels are the claim's labels: BackendStoragePrefix =
// the VM's name (VMINameLabelValue when longer than a label value).
func BackendStorageLabels(vmName string) map[string]string {
	return map[string]string{BackendStoragePrefix: VMINameLabelValue(vmName)}
}
