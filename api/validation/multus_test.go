package validation

import (
	"slices"
	"sort"
	"testing"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

func TestValidateMultusNetworks(t *testing.T) {
	multus := func(name, nad string, def bool) v1.Network {
		return v1.Network{Name: name, Multus: &v1.MultusNetwork{NetworkName: nad, Default: def}}
	}
	pod := v1.Network{Name: "default", Pod: &v1.PodNetwork{}}
	iface := func(name string) v1.Interface { return v1.Interface{Name: name} }
	tests := []struct {
		name   string
		nets   []v1.Network
		ifaces []v1.Interface
		want   []string
	}{
		{name: "pod and a secondary network (bridge by default)", nets: []v1.Network{pod, multus("blue", "blue-nad", false)},
			ifaces: []v1.Interface{iface("default"), iface("blue")}},
		{name: "namespace/name", nets: []v1.Network{pod, multus("blue", "other/blue-nad", false)},
			ifaces: []v1.Interface{iface("default"), iface("blue")}},
		{name: "the default Multus network alone", nets: []v1.Network{multus("main", "main-nad", true), multus("blue", "blue", false)},
			ifaces: []v1.Interface{iface("main"), iface("blue")}},
		{name: "no networkName", nets: []v1.Network{pod, multus("blue", "", false)},
			ifaces: []v1.Interface{iface("default"), iface("blue")},
			want:   []string{"Required value spec.networks[1].multus.networkName"}},
		{name: "bad networkName", nets: []v1.Network{pod, multus("blue", "Bad_NS/x", false), multus("red", "a/b/c", false)},
			ifaces: []v1.Interface{iface("default"), iface("blue"), iface("red")},
			want:   []string{"Invalid value spec.networks[1].multus.networkName", "Invalid value spec.networks[2].multus.networkName"}},
		{name: "two default networks", nets: []v1.Network{multus("a", "a", true), multus("b", "b", true)},
			ifaces: []v1.Interface{iface("a"), iface("b")},
			want:   []string{"Invalid value spec.networks[1].multus.default"}},
		{name: "a default network beside the pod network", nets: []v1.Network{pod, multus("a", "a", true)},
			ifaces: []v1.Interface{iface("default"), iface("a")},
			want:   []string{"Invalid value spec.networks[1].multus.default"}},
		{name: "pod and multus on one network", nets: []v1.Network{{Name: "default", Pod: &v1.PodNetwork{}, Multus: &v1.MultusNetwork{NetworkName: "x"}}},
			ifaces: []v1.Interface{{Name: "default", Bridge: &v1.InterfaceBridge{}}},
			want:   []string{"Invalid value spec.networks[0]"}},
		{name: "masquerade on a Multus network", nets: []v1.Network{pod, multus("blue", "blue", false)},
			ifaces: []v1.Interface{iface("default"), {Name: "blue", Masquerade: &v1.InterfaceMasquerade{}}},
			want:   []string{"Invalid value spec.domain.devices.interfaces[1].masquerade"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmi := baseVMI()
			vmi.Spec.Networks = tt.nets
			vmi.Spec.Domain.Devices.Interfaces = tt.ifaces
			v1.SetVirtualMachineInstanceDefaults(vmi)
			errs := ValidateVirtualMachineInstance(vmi)
			got := errorKeys(errs)
			want := slices.Clone(tt.want)
			sort.Strings(want)
			if !slices.Equal(got, want) {
				t.Errorf("errors:\n got  %q\n want %q\nfull: %v", got, want, errs)
			}
		})
	}
	vmi := baseVMI()
	vmi.Spec.Networks = []v1.Network{pod, multus("blue", "blue", false)}
	vmi.Spec.Domain.Devices.Interfaces = []v1.Interface{iface("default"), iface("blue")}
	v1.SetVirtualMachineInstanceDefaults(vmi)
	if d := vmi.Spec.Domain.Devices.Interfaces; d[0].Masquerade == nil || d[1].Bridge == nil || d[1].Masquerade != nil {
		t.Errorf("defaults: pod network %+v, Multus network %+v; want masquerade and bridge", d[0], d[1])
	}
}
