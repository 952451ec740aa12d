package validation

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// validateMultusNetworks checks networks[].multus as KubeVirt's admitter
// does: one source per network, a NetworkAttachmentDefinition name
// ("name" or "namespace/name"), at most one default network and none beside
// a pod network. The binding on a Multus network is bridge: masquerade is
// refused in validateNetworks, as on every network that is not the pod's.
func validateMultusNetworks(spec *v1.VirtualMachineInstanceSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	nets := fldPath.Child("networks")
	podNet, defaultNet := -1, -1
	for j := range spec.Networks {
		if spec.Networks[j].Pod != nil && podNet < 0 {
			podNet = j
		}
	}
	for j := range spec.Networks {
		n := &spec.Networks[j]
		if n.Multus == nil {
			continue
		}
		p := nets.Index(j)
		if n.Pod != nil {
			allErrs = append(allErrs, field.Invalid(p, n.Name, "a network has exactly one source: pod or multus"))
		}
		allErrs = append(allErrs, NetworkAttachmentName(p.Child("multus", "networkName"), n.Multus.NetworkName)...)
		if !n.Multus.Default {
			continue
		}
		dp := p.Child("multus", "default")
		switch {
		case defaultNet >= 0:
			allErrs = append(allErrs, field.Invalid(dp, true,
				fmt.Sprintf("Multus has one default network: %s is already", nets.Index(defaultNet))))
		case podNet >= 0:
			allErrs = append(allErrs, field.Invalid(dp, true,
				fmt.Sprintf("the default Multus network replaces the pod network: %s is a pod network", nets.Index(podNet))))
		}
		if defaultNet < 0 {
			defaultNet = j
		}
	}
	return allErrs
}

// NetworkAttachmentName checks a networks[].multus.networkName: "name" or
// "namespace/name", a NetworkAttachmentDefinition name (DNS-1123 subdomain)
// in a namespace (DNS-1123 label).
func NetworkAttachmentName(p *field.Path, val string) field.ErrorList {
	if val == "" {
		return field.ErrorList{field.Required(p, "the NetworkAttachmentDefinition: name or namespace/name")}
	}
	ns, name, qualified := strings.Cut(val, "/")
	if !qualified {
		ns, name = "", val
	}
	var msgs []string
	if qualified {
		for _, m := range validation.IsDNS1123Label(ns) {
			msgs = append(msgs, "namespace: "+m)
		}
	}
	for _, m := range validation.IsDNS1123Subdomain(name) {
		msgs = append(msgs, "name: "+m)
	}
	if len(msgs) > 0 {
		return field.ErrorList{field.Invalid(p, val, strings.Join(msgs, "; "))}
	}
	return nil
}
