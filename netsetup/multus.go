package netsetup

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// networkPodInterface is the Pod interface a VMI network arrives on: the
// pod network and the default Multus network on podIface (the primary
// interface, Options.PodInterface), a secondary Multus network on the
// interface Multus created under KubeVirt's hashed name
// (launcherpod.PodInterfaceName, as the controller's
// k8s.v1.cni.cncf.io/networks annotation requested it). A Multus network
// takes only the bridge binding, as KubeVirt's.
func networkPodInterface(n v1.Network, np *field.Path, podIface string, iface v1.Interface, ip *field.Path) (pod string, secondary bool, err *field.Error) {
	switch {
	case n.Pod != nil && n.Multus != nil:
		return "", false, field.Invalid(np, n.Name, "a network has exactly one source: pod or multus")
	case n.Pod != nil:
		return podIface, false, nil
	case n.Multus == nil:
		return "", false, field.NotSupported(np, "no source", []string{"pod", "multus"})
	case iface.Masquerade != nil:
		return "", false, field.Invalid(ip.Child("masquerade"), iface.Name, "masquerade is only for the pod network; a Multus network takes the bridge binding")
	case n.Multus.Default:
		return podIface, false, nil
	}
	return launcherpod.PodInterfaceName(n), true, nil
}

// l2Only says whether a bridge-bound interface passes layer 2 only: a
// secondary network whose pod interface has no IPv4 address (KubeVirt's
// bridge binding on a network without IPAM). The guest's DHCP client gets
// no answer; static addresses or the network's own DHCP work.
func (st *podState) l2Only() bool { return len(st.Addrs) == 0 }

// sourcePath is the network source field of errors about the pod
// interface: spec.networks[j].pod or spec.networks[j].multus.
func (pi *Interface) sourcePath() *field.Path {
	if pi.Multus {
		return pi.NetworkPath.Child("multus")
	}
	return pi.NetworkPath.Child("pod")
}
