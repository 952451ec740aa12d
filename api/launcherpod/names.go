package launcherpod

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// PodNamePrefix starts every launcher Pod's name.
const PodNamePrefix = "kemu-launcher-"

// MaxPodNameLength keeps launcher Pod names within 63 characters, as for a
// Pod the API server names from generateName (KubeVirt's virt-launcher-…):
// a Pod name is a DNS-1123 subdomain (253), but tools use it as a label
// value, and the kubelet as the default host name.
const MaxPodNameLength = 63

// PodName is the launcher Pod's name for a VMI: fixed for a VMI (a second
// create of the same VMI's Pod fails with AlreadyExists, a second safety
// net behind the controller's expectations) and different for a VMI of the
// same name created again (its UID differs): kemu-launcher-<name>-<5 hex of
// sha256(UID)>. A name too long for MaxPodNameLength (over 43 characters)
// is cut to 38 (trailing '-' and '.' trimmed) and followed by 10 hex digits
// of sha256(name/UID) instead, so two VMIs that share those 38 characters
// still differ.
func PodName(vmi *v1.VirtualMachineInstance) string {
	sum := sha256.Sum256([]byte(vmi.UID))
	if name := PodNamePrefix + vmi.Name + "-" + hex.EncodeToString(sum[:])[:5]; len(name) <= MaxPodNameLength {
		return name
	}
	sum = sha256.Sum256([]byte(vmi.Name + "/" + string(vmi.UID)))
	keep := MaxPodNameLength - len(PodNamePrefix) - len("-") - 10
	return PodNamePrefix + strings.TrimRight(vmi.Name[:keep], "-.") + "-" + hex.EncodeToString(sum[:])[:10]
}

// VMINameLabelValue is launcherpod.VMINameLabel's value for a VMI named name: the name
// when it is a label value (every object name of at most 63 characters,
// dots included), else its first 52 characters (trailing '-' and '.'
// trimmed), "-" and 10 hex digits of the name's SHA-256: stable, at most 63.
func VMINameLabelValue(name string) string {
	if len(utilvalidation.IsValidLabelValue(name)) == 0 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	keep := utilvalidation.LabelValueMaxLength - len("-") - 10
	return strings.TrimRight(name[:min(keep, len(name))], "-.") + "-" + hex.EncodeToString(sum[:])[:10]
}

// MigrationTargetPodName is the launcher Pod name of a migration's target
// Pod: PodName's scheme (length rules included) with the migration's UID
// hashed in beside the VMI's, so it differs from the VMI's first Pod and
// from every other migration's target, and stays fixed for one migration (a
// second create of the same target fails with AlreadyExists).
func MigrationTargetPodName(vmi *v1.VirtualMachineInstance, migrationUID types.UID) string {
	return PodName(&v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: vmi.Name, UID: vmi.UID + "/" + migrationUID}})
}
