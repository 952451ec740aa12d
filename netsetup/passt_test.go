package netsetup

import (
	"slices"
	"strings"
	"testing"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// passt's command line: KubeVirt's port rule (the listed ports, per
// protocol; none listed = all TCP and UDP).
func TestPasstArgs(t *testing.T) {
	base := "--foreground --quiet --stderr --fd 3 --ipv4-only --interface eth0"
	for _, tc := range []struct {
		name  string
		ports []Port
		want  string
	}{
		{"all", nil, base + " --tcp-ports all --udp-ports all"},
		{"tcp only", []Port{{"tcp", 80}, {"tcp", 443}}, base + " --tcp-ports 80,443"},
		{"udp only", []Port{{"udp", 53}}, base + " --udp-ports 53"},
		{"both", []Port{{"udp", 53}, {"tcp", 22}}, base + " --tcp-ports 22 --udp-ports 53"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.Join(PasstConfig{PodInterface: "eth0", Ports: tc.ports}.Args(3), " ")
			if got != tc.want {
				t.Errorf("args %q, want %q", got, tc.want)
			}
		})
	}
}

// A passt interface plans no tap, bridge or table; its ports are checked
// as masquerade's; the MAC is derived as masquerade's.
func TestPlanPasst(t *testing.T) {
	vmi := &v1.VirtualMachineInstance{}
	vmi.Name, vmi.Namespace, vmi.UID = "vm1", "ns", "7d7c3f00-0000-4000-8000-000000000001"
	vmi.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "default", Binding: &v1.PluginBinding{Name: "passt"},
		Ports: []v1.Port{{Port: 8080}, {Port: 53, Protocol: "UDP"}}}}
	vmi.Spec.Networks = []v1.Network{{Name: "default", Pod: &v1.PodNetwork{}}}
	p, errs := NewPlan(vmi, Options{})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	pi := p.Interfaces[0]
	if pi.Binding != BindingPasst || pi.Tap != "" || pi.Bridge != "" || pi.Table != "" || pi.Queues != 1 ||
		pi.MAC.String() != DeriveMAC(string(vmi.UID), "default").String() ||
		!slices.Equal(pi.Ports, []Port{{"tcp", 8080}, {"udp", 53}}) {
		t.Errorf("plan %+v", pi)
	}
	vmi.Spec.Domain.Devices.Interfaces[0].Ports = append(vmi.Spec.Domain.Devices.Interfaces[0].Ports, v1.Port{Port: 8080})
	if _, errs := NewPlan(vmi, Options{}); len(errs) != 1 || !strings.Contains(errs[0].Field, "ports[2]") {
		t.Errorf("a duplicate port: %v", errs)
	}
}
