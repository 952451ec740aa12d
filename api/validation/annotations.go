package validation

import (
	"sort"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// kubeVirtFeatureAnnotations are KubeVirt annotations that change what
// KubeVirt does with a VMI and that kemu does not implement. They are
// refused, naming the annotation, instead of being carried along unread:
// a manifest that relies on one would otherwise run differently without a
// word. KubeVirt's own bookkeeping annotations (set by its controllers) are
// not listed: a manifest does not set them.
var kubeVirtFeatureAnnotations = map[string]string{
	"hooks.kubevirt.io/hookSidecars":                       "sidecar hook containers in the launcher Pod",
	"kubevirt.io/ignitiondata":                             "Ignition data for the guest",
	"kubevirt.io/placePCIDevicesOnRootComplex":             "PCI devices on the root complex",
	"kubevirt.io/keep-launcher-alive-after-failure":        "keeping the launcher Pod after a failure",
	"kubevirt.io/libvirt-log-filters":                      "libvirt's log filters (kemu has no libvirt)",
	"kubevirt.io/memfd":                                    "choosing the guest memory backend",
	"kubevirt.io/allow-pod-bridge-network-live-migration":  "live migration with the bridge binding on the pod network",
	"kubevirt.io/free-page-reporting-disabled":             "turning off the balloon's free page reporting",
	"alpha.kubevirt.io/EmulatorThreadCompleteToEvenParity": "an even number of emulator thread CPUs",
}

// validateFeatureAnnotations refuses the KubeVirt feature annotations kemu
// does not implement (p is the object's metadata.annotations).
func validateFeatureAnnotations(annotations map[string]string, p *field.Path) field.ErrorList {
	var keys []string
	for k := range annotations {
		if _, ok := kubeVirtFeatureAnnotations[k]; ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var allErrs field.ErrorList
	for _, k := range keys {
		allErrs = append(allErrs, field.Forbidden(p.Key(k),
			"kemu does not support this KubeVirt annotation ("+kubeVirtFeatureAnnotations[k]+")"))
	}
	return allErrs
}
