package validation

import (
	"slices"
	"testing"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// passt is passtBinding or binding {name: passt}, on the pod network only,
// with its ports; state is up or down, absent refused by name.
func TestValidatePasstAndState(t *testing.T) {
	podIface := func(mut func(i *v1.Interface)) func(*v1.VirtualMachineInstance) {
		return func(vmi *v1.VirtualMachineInstance) {
			i := v1.Interface{Name: "default"}
			mut(&i)
			vmi.Spec.Domain.Devices.Interfaces = []v1.Interface{i}
			vmi.Spec.Networks = []v1.Network{{Name: "default", Pod: &v1.PodNetwork{}}}
		}
	}
	for _, tc := range []struct {
		name   string
		mutate func(*v1.VirtualMachineInstance)
		want   []string
	}{
		{name: "passtBinding with ports", mutate: podIface(func(i *v1.Interface) {
			i.PasstBinding = &v1.InterfacePasstBinding{}
			i.Ports = []v1.Port{{Port: 80}, {Port: 53, Protocol: "UDP"}}
		})},
		{name: "binding plugin passt", mutate: podIface(func(i *v1.Interface) { i.Binding = &v1.PluginBinding{Name: "passt"} })},
		{name: "unknown binding plugin", mutate: podIface(func(i *v1.Interface) { i.Binding = &v1.PluginBinding{Name: "slirp"} }),
			want: []string{"Unsupported value spec.domain.devices.interfaces[0].binding.name"}},
		{name: "passt and masquerade", mutate: podIface(func(i *v1.Interface) {
			i.PasstBinding = &v1.InterfacePasstBinding{}
			i.Masquerade = &v1.InterfaceMasquerade{}
		}), want: []string{"Invalid value spec.domain.devices.interfaces[0]"}},
		{name: "passt off the pod network", mutate: func(vmi *v1.VirtualMachineInstance) {
			podIface(func(i *v1.Interface) { i.Binding = &v1.PluginBinding{Name: "passt"} })(vmi)
			vmi.Spec.Networks[0].Pod = nil
		}, want: []string{"Invalid value spec.domain.devices.interfaces[0].binding", "Required value spec.networks[0].pod"}},
		{name: "state down", mutate: podIface(func(i *v1.Interface) {
			i.Masquerade = &v1.InterfaceMasquerade{}
			i.State = v1.InterfaceStateLinkDown
		})},
		{name: "state up on passt", mutate: podIface(func(i *v1.Interface) {
			i.PasstBinding = &v1.InterfacePasstBinding{}
			i.State = v1.InterfaceStateLinkUp
		})},
		{name: "state absent", mutate: podIface(func(i *v1.Interface) {
			i.Bridge = &v1.InterfaceBridge{}
			i.State = v1.InterfaceStateAbsent
		}), want: []string{"Forbidden spec.domain.devices.interfaces[0].state"}},
		{name: "state bogus", mutate: podIface(func(i *v1.Interface) {
			i.Bridge = &v1.InterfaceBridge{}
			i.State = "sideways"
		}), want: []string{"Unsupported value spec.domain.devices.interfaces[0].state"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vmi := baseVMI()
			tc.mutate(vmi)
			v1.SetVirtualMachineInstanceDefaults(vmi)
			got := errorKeys(ValidateVirtualMachineInstance(vmi))
			if !slices.Equal(got, tc.want) {
				t.Errorf("errors %v, want %v", got, tc.want)
			}
		})
	}
}
