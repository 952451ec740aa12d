package admission

import (
	apiequality "k8s.io/apimachinery/pkg/api/equality"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/api/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// onlyLinkStatesDiffer: the one change a running VMI's spec takes is
// interfaces[].state between up and down (KubeVirt's link state; the node
// agent's Sync turns it into set_link). The same interfaces, in the same
// order, each with a valid state, and nothing else changed.
func onlyLinkStatesDiffer(old, cur *v1.VirtualMachineInstanceSpec) bool {
	a, b := old.Domain.Devices.Interfaces, cur.Domain.Devices.Interfaces
	if len(a) != len(b) {
		return false
	}
	oc, nc := old.DeepCopy(), cur.DeepCopy()
	p := field.NewPath("spec", "domain", "devices", "interfaces")
	for i := range b {
		if len(validation.ValidateInterfaceState(p.Index(i).Child("state"), b[i].State)) > 0 {
			return false
		}
		oc.Domain.Devices.Interfaces[i].State, nc.Domain.Devices.Interfaces[i].State = "", ""
	}
	return apiequality.Semantic.DeepEqual(oc, nc)
}
