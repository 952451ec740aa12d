package netsetup

import (
	"strings"
	"testing"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// multusVMI: the pod network (masquerade) and two secondary Multus
// networks, in an order of interfaces that differs from the networks'.
func multusVMI(mut func(*v1.VirtualMachineInstance)) *v1.VirtualMachineInstance {
	return testVMI(func(vmi *v1.VirtualMachineInstance) {
		vmi.Spec.Networks = append(vmi.Spec.Networks,
			v1.Network{Name: "red", Multus: &v1.MultusNetwork{NetworkName: "other/red"}},
			v1.Network{Name: "blue", Multus: &v1.MultusNetwork{NetworkName: "blue"}})
		vmi.Spec.Domain.Devices.Interfaces = append(vmi.Spec.Domain.Devices.Interfaces,
			v1.Interface{Name: "blue", Bridge: &v1.InterfaceBridge{}, MacAddress: "02:00:00:00:00:0b", Model: "e1000"},
			v1.Interface{Name: "red", Bridge: &v1.InterfaceBridge{}, Model: "virtio"})
		if mut != nil {
			mut(vmi)
		}
	})
}

func TestPlanMultus(t *testing.T) {
	for _, tc := range []struct {
		name  string
		vmi   *v1.VirtualMachineInstance
		opts  Options
		check func(t *testing.T, p *Plan)
		want  []string
	}{
		{name: "secondary networks: KubeVirt's pod interface names, kemu's hashed link names, interfaces' order",
			vmi: multusVMI(func(vmi *v1.VirtualMachineInstance) {
				vmi.Spec.Domain.Devices.NetworkInterfaceMultiqueue = ptr(true)
				vmi.Spec.Domain.CPU = &v1.CPU{Cores: 2}
			}),
			check: func(t *testing.T, p *Plan) {
				if len(p.Interfaces) != 3 {
					t.Fatalf("%d interfaces", len(p.Interfaces))
				}
				pod, blue, red := p.Interfaces[0], p.Interfaces[1], p.Interfaces[2]
				if pod.Name != "default" || pod.PodInterface != "eth0" || pod.Secondary || pod.Multus {
					t.Errorf("pod network: %+v", pod)
				}
				if blue.Name != "blue" || blue.PodInterface != "pod16477688c0e" || !blue.Secondary || !blue.Multus || blue.Binding != BindingBridge {
					t.Errorf("blue: %+v", blue)
				}
				if red.Name != "red" || red.PodInterface != "podb1f51a511f1" || red.Index != 2 {
					t.Errorf("red: %+v", red)
				}
				seen := map[string]bool{}
				for _, pi := range p.Interfaces {
					for _, n := range []string{pi.Bridge, pi.Tap} {
						if len(n) > maxLinkName || seen[n] {
							t.Errorf("link name %q: too long or not unique", n)
						}
						seen[n] = true
					}
				}
				if blue.Bridge != BridgeName("pod16477688c0e") || !strings.HasPrefix(blue.Tap, TapPrefix) {
					t.Errorf("blue's links %s %s", blue.Bridge, blue.Tap)
				}
				if blue.MAC.String() != "02:00:00:00:00:0b" || red.MAC != nil {
					t.Errorf("MACs: blue %s, red %s (nil: the pod interface's)", blue.MAC, red.MAC)
				}
				if blue.Queues != 1 || red.Queues != 2 || pod.Queues != 2 {
					t.Errorf("queues: pod %d blue (e1000) %d red %d", pod.Queues, blue.Queues, red.Queues)
				}
				if blue.sourcePath().String() != "spec.networks[2].multus" || pod.sourcePath().String() != "spec.networks[0].pod" {
					t.Errorf("source paths %s %s", blue.sourcePath(), pod.sourcePath())
				}
			}},
		{name: "the default Multus network is the primary interface",
			vmi: testVMI(func(vmi *v1.VirtualMachineInstance) {
				vmi.Spec.Networks = []v1.Network{{Name: "main", Multus: &v1.MultusNetwork{NetworkName: "main", Default: true}}}
				vmi.Spec.Domain.Devices.Interfaces = []v1.Interface{{Name: "main", Bridge: &v1.InterfaceBridge{}}}
			}),
			check: func(t *testing.T, p *Plan) {
				pi := p.Interfaces[0]
				if pi.PodInterface != "eth0" || pi.Bridge != "kbr-eth0" || pi.Secondary || !pi.Multus {
					t.Errorf("%+v", pi)
				}
			}},
		{name: "masquerade on a Multus network",
			vmi: multusVMI(func(vmi *v1.VirtualMachineInstance) {
				vmi.Spec.Domain.Devices.Interfaces[1].Bridge = nil
				vmi.Spec.Domain.Devices.Interfaces[1].Masquerade = &v1.InterfaceMasquerade{}
			}),
			want: []string{"spec.domain.devices.interfaces[1].masquerade", "bridge binding"}},
		{name: "a default Multus network beside the pod network: both on eth0",
			vmi:  multusVMI(func(vmi *v1.VirtualMachineInstance) { vmi.Spec.Networks[2].Multus.Default = true }),
			want: []string{"spec.domain.devices.interfaces[1].name", "pod interface eth0 is already attached"}},
		{name: "pod and multus on one network",
			vmi:  multusVMI(func(vmi *v1.VirtualMachineInstance) { vmi.Spec.Networks[1].Pod = &v1.PodNetwork{} }),
			want: []string{"spec.networks[1]: Invalid value"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			opts.TapUID, opts.TapGID = -1, -1
			p, errs := NewPlan(tc.vmi, opts)
			if len(tc.want) == 0 {
				if len(errs) > 0 {
					t.Fatal(errs)
				}
				tc.check(t, p)
				return
			}
			if len(errs) == 0 {
				t.Fatalf("no error, want %q", tc.want)
			}
			msg := errs.ToAggregate().Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%s\nlacks %q", msg, w)
				}
			}
		})
	}
}
