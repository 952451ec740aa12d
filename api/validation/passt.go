package validation

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// interfaceBindings counts the bindings kemu implements that an interface
// names (bridge, masquerade, passtBinding, binding).
func interfaceBindings(iface *v1.Interface) int {
	n := 0
	for _, set := range []bool{iface.Bridge != nil, iface.Masquerade != nil, iface.PasstBinding != nil, iface.Binding != nil} {
		if set {
			n++
		}
	}
	return n
}

// validatePasstInterface: passtBinding, or the binding plugin "passt" (the
// one plugin kemu knows, KubeVirt's passt network binding plugin), only on
// the pod network, as KubeVirt's admitter says.
func validatePasstInterface(p *field.Path, iface *v1.Interface, network *v1.Network, networkFound bool) field.ErrorList {
	var errs field.ErrorList
	if b := iface.Binding; b != nil && b.Name != v1.PasstBindingPluginName {
		errs = append(errs, field.NotSupported(p.Child("binding", "name"), b.Name, []string{v1.PasstBindingPluginName}))
	}
	if !iface.UsesPasst() || !networkFound || network == nil || network.Pod != nil {
		return errs
	}
	bp := p.Child("passtBinding")
	if iface.PasstBinding == nil {
		bp = p.Child("binding")
	}
	return append(errs, field.Invalid(bp, iface.Name, "passt is only for the pod network"))
}

// ValidateInterfaceState: up or down (KubeVirt's link states). "absent",
// KubeVirt's hot-unplug of a bridge interface, is refused by name: kemu
// does not hot-unplug NICs.
func ValidateInterfaceState(p *field.Path, state v1.InterfaceState) field.ErrorList {
	switch state {
	case "", v1.InterfaceStateLinkUp, v1.InterfaceStateLinkDown:
		return nil
	case v1.InterfaceStateAbsent:
		return field.ErrorList{field.Forbidden(p, "absent (hot-unplug) is not supported by kemu; up or down")}
	}
	return field.ErrorList{field.NotSupported(p, string(state), []string{string(v1.InterfaceStateLinkUp), string(v1.InterfaceStateLinkDown)})}
}
