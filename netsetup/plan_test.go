package netsetup

import (
	"net/netip"
	"strings"
	"testing"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

func testVMI(mut func(*v1.VirtualMachineInstance)) *v1.VirtualMachineInstance {
	vmi := &v1.VirtualMachineInstance{}
	vmi.Name, vmi.Namespace, vmi.UID = "vm1", "ns1", "7d7c3f00-0000-4000-8000-000000000001"
	v1.SetVirtualMachineInstanceDefaults(vmi)
	if mut != nil {
		mut(vmi)
	}
	return vmi
}

func ptr[T any](v T) *T { return &v }

func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mut   func(*v1.VirtualMachineInstance)
		opts  Options
		check func(t *testing.T, p *Plan)
		want  []string // error substrings; none = must succeed
	}{
		{name: "default masquerade", check: func(t *testing.T, p *Plan) {
			pi := p.Interfaces[0]
			if pi.Binding != BindingMasquerade || pi.Bridge != "kbr-eth0" || pi.Tap != "ktap-eth0" || pi.Table != "kemu-eth0" {
				t.Errorf("names: %+v", pi)
			}
			if pi.VMNetwork.String() != "10.0.2.0/24" || pi.Gateway.String() != "10.0.2.1" || pi.GuestIP.String() != "10.0.2.2" {
				t.Errorf("addresses: %s %s %s", pi.VMNetwork, pi.Gateway, pi.GuestIP)
			}
			if pi.MAC.String() != DeriveMAC("7d7c3f00-0000-4000-8000-000000000001", "default").String() || pi.Queues != 1 || len(pi.Ports) != 0 {
				t.Errorf("mac %s queues %d ports %v", pi.MAC, pi.Queues, pi.Ports)
			}
			if pi.Hostname != "vm1" || p.ResolvConf != DefaultResolvConf {
				t.Errorf("hostname %q resolv.conf %q", pi.Hostname, p.ResolvConf)
			}
		}},
		{name: "dotted and long VMI names: the DHCP host name is the Pod's", mut: func(vmi *v1.VirtualMachineInstance) {
			vmi.Name = strings.Repeat("w", 70) + ".example.com"
		}, check: func(t *testing.T, p *Plan) {
			if h := p.Interfaces[0].Hostname; h != strings.Repeat("w", 63) {
				t.Errorf("hostname %q", h)
			}
		}},
		{name: "spec.hostname and subdomain: the DHCP host name and search", mut: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Hostname, vmi.Spec.Subdomain = "web-1", "web"
		}, check: func(t *testing.T, p *Plan) {
			if pi := p.Interfaces[0]; pi.Hostname != "web-1" || pi.Subdomain != "web" {
				t.Errorf("hostname %q subdomain %q", pi.Hostname, pi.Subdomain)
			}
		}},
		{name: "custom CIDR, MAC, ports, pod interface", opts: Options{PodInterface: "net1"}, mut: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Networks[0].Pod.VMNetworkCIDR = "192.168.7.128/25"
			vmi.Spec.Domain.Devices.Interfaces[0].MacAddress = "02:AA:bb:cc:dd:ee"
			vmi.Spec.Domain.Devices.Interfaces[0].Ports = []v1.Port{{Port: 80}, {Port: 53, Protocol: "UDP"}}
		}, check: func(t *testing.T, p *Plan) {
			pi := p.Interfaces[0]
			if pi.Gateway.String() != "192.168.7.129" || pi.GuestIP.String() != "192.168.7.130" || pi.MAC.String() != "02:aa:bb:cc:dd:ee" {
				t.Errorf("%s %s %s", pi.Gateway, pi.GuestIP, pi.MAC)
			}
			if pi.PodInterface != "net1" || pi.Bridge != "kbr-net1" {
				t.Errorf("pod interface %s bridge %s", pi.PodInterface, pi.Bridge)
			}
			want := []Port{{"tcp", 80}, {"udp", 53}}
			if len(pi.Ports) != 2 || pi.Ports[0] != want[0] || pi.Ports[1] != want[1] {
				t.Errorf("ports %v", pi.Ports)
			}
		}},
		{name: "bridge keeps the pod MAC for later", mut: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Interfaces[0].Masquerade = nil
			vmi.Spec.Domain.Devices.Interfaces[0].Bridge = &v1.InterfaceBridge{}
		}, check: func(t *testing.T, p *Plan) {
			pi := p.Interfaces[0]
			if pi.Binding != BindingBridge || pi.MAC != nil || pi.PodMAC == nil || pi.Table != "" {
				t.Errorf("%+v", pi)
			}
		}},
		{name: "multiqueue from the spec: one queue per vCPU", mut: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.NetworkInterfaceMultiqueue = ptr(true)
			vmi.Spec.Domain.CPU.Sockets, vmi.Spec.Domain.CPU.Cores, vmi.Spec.Domain.CPU.Threads = 2, 3, 1
		}, check: func(t *testing.T, p *Plan) {
			if q := p.Interfaces[0].Queues; q != 6 {
				t.Errorf("queues %d, want 6", q)
			}
		}},
		{name: "multiqueue option, not for e1000", opts: Options{Multiqueue: ptr(true)}, mut: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.CPU.Cores = 4
			vmi.Spec.Domain.Devices.Interfaces[0].Model = "e1000"
		}, check: func(t *testing.T, p *Plan) {
			if q := p.Interfaces[0].Queues; q != 1 {
				t.Errorf("queues %d, want 1", q)
			}
		}},
		{name: "multiqueue capped", opts: Options{Multiqueue: ptr(true)}, mut: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.CPU.Cores, vmi.Spec.Domain.CPU.Sockets = 200, 2
		}, check: func(t *testing.T, p *Plan) {
			if q := p.Interfaces[0].Queues; q != MaxQueues {
				t.Errorf("queues %d", q)
			}
		}},
		{name: "no interfaces", mut: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Interfaces, vmi.Spec.Networks = nil, nil
		}, check: func(t *testing.T, p *Plan) {
			if len(p.Interfaces) != 0 {
				t.Errorf("%+v", p.Interfaces)
			}
		}},
		{name: "interface without network", mut: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Interfaces[0].Name = "other"
		}, want: []string{"spec.domain.devices.interfaces[0].name: Not found: \"other\""}},
		{name: "bad CIDR", mut: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Networks[0].Pod.VMNetworkCIDR = "fd10::/120"
		}, want: []string{"spec.networks[0].pod.vmNetworkCIDR: Invalid value: \"fd10::/120\": must be an IPv4 CIDR"}},
		{name: "CIDR too small", mut: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Networks[0].Pod.VMNetworkCIDR = "10.0.2.0/31"
		}, want: []string{"spec.networks[0].pod.vmNetworkCIDR", "/30 or shorter"}},
		{name: "CIDR overlaps the pod network", opts: Options{PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16")}},
			want: []string{"spec.networks[0].pod.vmNetworkCIDR: Invalid value: \"10.0.2.0/24\": overlaps the pod's network 10.0.0.0/16"}},
		{name: "bad MAC", mut: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Interfaces[0].MacAddress = "03:00:00:00:00:01"
		}, want: []string{"spec.domain.devices.interfaces[0].macAddress", "unicast"}},
		{name: "bad and duplicate ports", mut: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Interfaces[0].Ports = []v1.Port{{Port: 0}, {Port: 22, Protocol: "SCTP"}, {Port: 80}, {Port: 80, Protocol: "tcp"}}
		}, want: []string{"spec.domain.devices.interfaces[0].ports[0].port", "ports[1].protocol", "ports[3]: Duplicate value: \"TCP/80\""}},
		{name: "ports with bridge", mut: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Interfaces[0].Masquerade = nil
			vmi.Spec.Domain.Devices.Interfaces[0].Bridge = &v1.InterfaceBridge{}
			vmi.Spec.Domain.Devices.Interfaces[0].Ports = []v1.Port{{Port: 80}}
		}, want: []string{"spec.domain.devices.interfaces[0].ports"}},
		{name: "non-pod network", mut: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Networks[0].Pod = nil
		}, want: []string{"spec.networks[0]: Unsupported value"}},
		{name: "two interfaces on the pod network", mut: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Networks = append(vmi.Spec.Networks, v1.Network{Name: "second", Pod: &v1.PodNetwork{}})
			vmi.Spec.Domain.Devices.Interfaces = append(vmi.Spec.Domain.Devices.Interfaces, v1.Interface{Name: "second", Bridge: &v1.InterfaceBridge{}})
		}, want: []string{"spec.domain.devices.interfaces[1].name", "already attached by interface \"default\""}},
		{name: "bad pod interface option", opts: Options{PodInterface: "a-very-long-interface"}, want: []string{"options.podInterface"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, errs := NewPlan(testVMI(tc.mut), tc.opts)
			if len(tc.want) == 0 {
				if len(errs) > 0 {
					t.Fatalf("errors: %v", errs)
				}
				tc.check(t, p)
				return
			}
			if len(errs) == 0 {
				t.Fatalf("no error, want %q", tc.want)
			}
			if p != nil {
				t.Errorf("a plan despite errors")
			}
			msg := errs.ToAggregate().Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q lacks %q", msg, w)
				}
			}
		})
	}
	if _, errs := NewPlan(nil, Options{}); len(errs) == 0 {
		t.Error("nil VMI: no error")
	}
}

func TestNames(t *testing.T) {
	for _, tc := range []struct{ pod, bridge, tap, table string }{
		{"eth0", "kbr-eth0", "ktap-eth0", "kemu-eth0"},
		{"net1", "kbr-net1", "ktap-net1", "kemu-net1"},
		{"abcdefghijk", "kbr-abcdefghijk", "ktap-ca2f2069ea", "kemu-abcdefghijk"},
	} {
		if b, tp, tb := BridgeName(tc.pod), TapName(tc.pod), TableName(tc.pod); b != tc.bridge || tp != tc.tap || tb != tc.table {
			t.Errorf("%s: %s %s %s, want %s %s %s", tc.pod, b, tp, tb, tc.bridge, tc.tap, tc.table)
		}
		if len(TapName(tc.pod)) > 15 || len(BridgeName(tc.pod)) > 15 {
			t.Errorf("%s: name too long", tc.pod)
		}
	}
}

func TestDeriveMAC(t *testing.T) {
	a := DeriveMAC("uid-1", "default")
	if a.String() != DeriveMAC("uid-1", "default").String() {
		t.Error("not stable")
	}
	for _, other := range []string{DeriveMAC("uid-2", "default").String(), DeriveMAC("uid-1", "other").String()} {
		if other == a.String() {
			t.Errorf("collision %s", other)
		}
	}
	for _, m := range [][]byte{a, DeriveMAC("", ""), DeriveMAC("x", "y")} {
		if len(m) != 6 || m[0]&1 != 0 || m[0]&2 == 0 {
			t.Errorf("%x: not a locally administered unicast MAC", m)
		}
	}
}

func TestGuestNetwork(t *testing.T) {
	for _, tc := range []struct{ cidr, pfx, gw, guest, err string }{
		{"10.0.2.0/24", "10.0.2.0/24", "10.0.2.1", "10.0.2.2", ""},
		{"10.0.2.77/24", "10.0.2.0/24", "10.0.2.1", "10.0.2.2", ""},
		{"172.16.0.0/30", "172.16.0.0/30", "172.16.0.1", "172.16.0.2", ""},
		{"172.16.0.0/31", "", "", "", "/30 or shorter"},
		{"fd10:0:2::/120", "", "", "", "IPv4"},
		{"nonsense", "", "", "", "IPv4"},
	} {
		pfx, gw, guest, err := guestNetwork(tc.cidr)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want %q", tc.cidr, err, tc.err)
			}
			continue
		}
		if err != nil || pfx.String() != tc.pfx || gw.String() != tc.gw || guest.String() != tc.guest {
			t.Errorf("%s: %s %s %s %v", tc.cidr, pfx, gw, guest, err)
		}
	}
}

func TestOverlapsAny(t *testing.T) {
	vm := netip.MustParsePrefix("10.0.2.0/24")
	for _, tc := range []struct {
		others []string
		want   bool
	}{
		{nil, false},
		{[]string{"10.244.1.0/24", "192.168.0.0/16"}, false},
		{[]string{"10.0.0.0/8"}, true},
		{[]string{"10.0.2.128/25"}, true},
		{[]string{"10.0.2.5/32"}, true},
		{[]string{"0.0.0.0/0"}, false}, // a default route is not a conflict
		{[]string{"fd00::/8"}, false},
	} {
		var ps []netip.Prefix
		for _, o := range tc.others {
			ps = append(ps, netip.MustParsePrefix(o))
		}
		if _, got := overlapsAny(vm, ps); got != tc.want {
			t.Errorf("%v: %v, want %v", tc.others, got, tc.want)
		}
	}
}
