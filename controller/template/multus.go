package template

import (
	"encoding/json"
	"fmt"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// networkSelection is Multus's NetworkSelectionElement, the fields KubeVirt
// sets.
type networkSelection struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	MAC       string `json:"mac,omitempty"`
	Interface string `json:"interface,omitempty"`
}

// MultusAnnotations are the launcher Pod's Multus annotations for the VMI's
// networks, as KubeVirt's: every secondary Multus network with an interface,
// in spec.networks' order, its Pod interface named by
// launcherpod.PodInterfaceName, with the interface's macAddress; the default
// Multus network's networkName as given.
// None when the VMI has no Multus network.
func MultusAnnotations(vmi *v1.VirtualMachineInstance) (map[string]string, error) {
	macs := map[string]string{}
	for _, iface := range vmi.Spec.Domain.Devices.Interfaces {
		macs[iface.Name] = iface.MacAddress
	}
	out := map[string]string{}
	var sel []networkSelection
	for _, n := range vmi.Spec.Networks {
		if n.Multus == nil {
			continue
		}
		if n.Multus.Default {
			if _, dup := out[launcherpod.DefaultNetworkAnnotation]; !dup {
				out[launcherpod.DefaultNetworkAnnotation] = n.Multus.NetworkName
			}
			continue
		}
		mac, ok := macs[n.Name]
		if !ok {
			continue // no interface: validation refuses it
		}
		ns, name := launcherpod.NetworkAttachment(vmi.Namespace, n.Multus.NetworkName)
		sel = append(sel, networkSelection{Name: name, Namespace: ns, MAC: mac, Interface: launcherpod.PodInterfaceName(n)})
	}
	if len(sel) > 0 {
		b, err := json.Marshal(sel)
		if err != nil {
			return nil, fmt.Errorf("template: %s: %w", launcherpod.NetworksAnnotation, err)
		}
		out[launcherpod.NetworksAnnotation] = string(b)
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}
