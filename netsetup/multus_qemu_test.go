//go:build qemu

package netsetup

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// secondaryPodIface adds a Multus-like secondary interface to the pod
// namespace: a veth named as KubeVirt's name scheme names it, its peer in
// the node namespace with nodeCIDR, and podCIDR on the pod side unless "".
func (e *podEnv) secondaryPodIface(t *testing.T, name, peer, podCIDR, nodeCIDR string) net.HardwareAddr {
	t.Helper()
	hp, hn := handle(t, e.Pod), handle(t, e.Node)
	attrs := netlink.NewLinkAttrs()
	attrs.Name, attrs.MTU = name, 1400
	must(t, hp.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: peer, PeerNamespace: netlink.NsFd(e.Node)}), "veth %s", name)
	l, err := hp.LinkByName(name)
	must(t, err, "%s", name)
	if podCIDR != "" {
		a, err := netlink.ParseAddr(podCIDR)
		must(t, err, "%s", podCIDR)
		must(t, hp.AddrAdd(l, a), "address of %s", name)
	}
	must(t, hp.LinkSetUp(l), "%s up", name)
	pl, err := hn.LinkByName(peer)
	must(t, err, "%s", peer)
	a, err := netlink.ParseAddr(nodeCIDR)
	must(t, err, "%s", nodeCIDR)
	must(t, hn.AddrAdd(pl, a), "address of %s", peer)
	must(t, hn.LinkSetMTU(pl, 1400), "MTU of %s", peer)
	must(t, hn.LinkSetUp(pl), "%s up", peer)
	return l.Attrs().HardwareAddr
}

// secondaryGuest is a fake guest NIC on a bridge, in a namespace of its own.
func (e *podEnv) secondaryGuest(t *testing.T, suffix, bridge string, mac net.HardwareAddr, cidr string) netns.NsHandle {
	t.Helper()
	ns := newNamedNS(t, e.Name+suffix)
	port := "k" + suffix + "-" + e.Name[2:8]
	hp, hg := handle(t, e.Pod), handle(t, ns)
	attrs := netlink.NewLinkAttrs()
	attrs.Name, attrs.MTU = port, 1400
	must(t, hp.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: "eth0", PeerHardwareAddr: mac, PeerNamespace: netlink.NsFd(ns)}), "guest veth")
	pl, err := hp.LinkByName(port)
	must(t, err, "guest port")
	br, err := hp.LinkByName(bridge)
	must(t, err, "bridge")
	must(t, hp.LinkSetMaster(pl, br), "enslave guest port")
	must(t, hp.LinkSetUp(pl), "guest port up")
	for _, n := range []string{"lo", "eth0"} {
		l, err := hg.LinkByName(n)
		must(t, err, "link %s", n)
		must(t, hg.LinkSetUp(l), "%s up", n)
		if n == "eth0" && cidr != "" {
			a, err := netlink.ParseAddr(cidr)
			must(t, err, "%s", cidr)
			must(t, hg.AddrAdd(l, a), "guest address")
		}
	}
	return ns
}

// The pod network (masquerade) and two secondary Multus networks on their
// own pod interfaces: "blue" without an address passes layer 2 only (no
// DHCP, the guest's static address reaches the node's side), "red" with
// one is offered to the guest by DHCP with the pod interface's MAC. Each
// secondary gets its own bridge and tap with its pod interface's MTU;
// Teardown gives both pod interfaces back.
func TestMultusFakeGuests(t *testing.T) {
	t.Parallel()
	e := newPodEnv(t)
	blue, red := "pod16477688c0e", "podb1f51a511f1" // launcherpod.PodInterfaceName of "blue", "red"
	e.secondaryPodIface(t, blue, "sec-b", "", "192.168.50.1/24")
	redMAC := e.secondaryPodIface(t, red, "sec-r", "192.168.60.5/24", "192.168.60.1/24")
	p := e.plan(t, func(vmi *v1.VirtualMachineInstance) {
		vmi.Spec.Networks = append(vmi.Spec.Networks,
			v1.Network{Name: "red", Multus: &v1.MultusNetwork{NetworkName: "red"}},
			v1.Network{Name: "blue", Multus: &v1.MultusNetwork{NetworkName: "ns/blue"}})
		vmi.Spec.Domain.Devices.Interfaces = append(vmi.Spec.Domain.Devices.Interfaces,
			v1.Interface{Name: "blue", Bridge: &v1.InterfaceBridge{}, MacAddress: "02:00:00:00:00:0b"},
			v1.Interface{Name: "red", Bridge: &v1.InterfaceBridge{}})
	}, Options{})
	before := links(t, e.Pod)
	r := e.setup(t, p)
	if len(r.Interfaces) != 3 || len(r.servers) != 2 {
		t.Fatalf("%d interfaces, %d DHCP servers; want 3 and 2 (none on the layer 2 network)", len(r.Interfaces), len(r.servers))
	}
	bi, ri := r.Interfaces[1], r.Interfaces[2]
	if bi.Name != "blue" || bi.MAC != "02:00:00:00:00:0b" || len(bi.IPs) != 0 || bi.GuestIP != "" || bi.MTU != 1400 {
		t.Errorf("blue: %+v", bi)
	}
	if ri.Name != "red" || ri.MAC != redMAC.String() || !slices.Equal(ri.IPs, []string{"192.168.60.5"}) || ri.GuestIP != "192.168.60.5/24" || ri.MTU != 1400 {
		t.Errorf("red: %+v (pod MAC %s)", ri, redMAC)
	}
	h := handle(t, e.Pod)
	for i, pi := range p.Interfaces[1:] {
		ir := r.Interfaces[i+1]
		tap, err := h.LinkByName(ir.Tap)
		must(t, err, "tap %s", ir.Tap)
		br, err := h.LinkByName(pi.Bridge)
		must(t, err, "bridge %s", pi.Bridge)
		pod, err := h.LinkByName(pi.PodInterface)
		must(t, err, "%s", pi.PodInterface)
		addrs, _ := h.AddrList(pod, netlink.FAMILY_V4)
		if tap.Attrs().MasterIndex != br.Attrs().Index || pod.Attrs().MasterIndex != br.Attrs().Index || tap.Attrs().MTU != 1400 || len(addrs) != 0 {
			t.Errorf("%s: tap master %d, pod interface master %d (bridge %d), tap MTU %d, pod addresses %v",
				pi.Name, tap.Attrs().MasterIndex, pod.Attrs().MasterIndex, br.Attrs().Index, tap.Attrs().MTU, addrs)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bg := e.secondaryGuest(t, "b", p.Interfaces[1].Bridge, net.HardwareAddr{2, 0, 0, 0, 0, 0x0b}, "192.168.50.2/24")
	listen(t, e.Node, "192.168.50.1:9002", "blue")
	if got, err := get(ctx, bg, "192.168.50.1:9002"); err != nil || got != "blue from 192.168.50.2" {
		t.Errorf("blue guest → node side: %q, %v", got, err)
	}
	rg := e.secondaryGuest(t, "r", p.Interfaces[2].Bridge, redMAC, "")
	lease := (&fakeGuest{ns: rg}).dhcp(t, false)
	if ones, _ := lease.ACK.SubnetMask().Size(); lease.ACK.YourIPAddr.String() != "192.168.60.5" || ones != 24 {
		t.Errorf("red lease %s/%d", lease.ACK.YourIPAddr, ones)
	}

	must(t, r.Teardown(context.Background()), "Teardown")
	after := links(t, e.Pod)
	for _, l := range after {
		if !slices.Contains(before, l) && l != "kb-"+e.Name[2:8] && l != "kr-"+e.Name[2:8] {
			t.Errorf("left after Teardown: %s (before %v, after %v)", l, before, after)
		}
	}
	rl, err := h.LinkByName(red)
	must(t, err, "red")
	addrs, _ := h.AddrList(rl, netlink.FAMILY_V4)
	if len(addrs) != 1 || addrs[0].IPNet.String() != "192.168.60.5/24" || rl.Attrs().HardwareAddr.String() != redMAC.String() || rl.Attrs().MasterIndex != 0 {
		t.Errorf("red pod interface after Teardown: %v %s master %d", addrs, rl.Attrs().HardwareAddr, rl.Attrs().MasterIndex)
	}
}

// The test guest with the pod network and two secondary Multus networks:
// its NICs come in interfaces' order with their MACs (eth1 the layer 2
// "blue" with its macAddress, eth2 "red" with its pod interface's MAC);
// eth0 and eth2 lease their addresses, eth1 gets no DHCP answer and works
// with a static address; the guest reaches the node side of both.
func TestVMMultus(t *testing.T) {
	t.Parallel()
	e := newPodEnv(t)
	blue, red := "pod16477688c0e", "podb1f51a511f1"
	e.secondaryPodIface(t, blue, "sec-b", "", "192.168.50.1/24")
	redMAC := e.secondaryPodIface(t, red, "sec-r", "192.168.60.5/24", "192.168.60.1/24")
	var vmi *v1.VirtualMachineInstance
	p := e.plan(t, func(v *v1.VirtualMachineInstance) {
		kernelBoot(v)
		v.Spec.Networks = append(v.Spec.Networks,
			v1.Network{Name: "red", Multus: &v1.MultusNetwork{NetworkName: "red"}},
			v1.Network{Name: "blue", Multus: &v1.MultusNetwork{NetworkName: "blue"}})
		v.Spec.Domain.Devices.Interfaces = append(v.Spec.Domain.Devices.Interfaces,
			v1.Interface{Name: "blue", Bridge: &v1.InterfaceBridge{}, MacAddress: "02:00:00:00:00:0b"},
			v1.Interface{Name: "red", Bridge: &v1.InterfaceBridge{}})
		vmi = v
	}, Options{})
	r := e.setup(t, p)
	vm := boot(t, vmi, r)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for iface, mac := range map[string]string{"eth1": "02:00:00:00:00:0b", "eth2": redMAC.String()} {
		m, err := vm.w.WaitKind(ctx, "nic", "iface", iface)
		must(t, err, "nic marker of %s", iface)
		checkMarker(t, m, "mac", mac)
	}
	checkMarker(t, vm.lease(t), "status", "bound", "ip", "10.0.2.2/24")
	m, err := vm.w.WaitKind(ctx, "net", "iface", "eth2")
	must(t, err, "eth2's DHCP")
	checkMarker(t, m, "status", "bound", "ip", "192.168.60.5/24")
	m, err = vm.w.WaitKind(ctx, "net", "iface", "eth1")
	must(t, err, "eth1's DHCP")
	checkMarker(t, m, "status", "failed")
	vm.ping(t, "192.168.60.1")
	if rc, out := vm.run(t, "/bin/sh", "-c", "ip addr add 192.168.50.2/24 dev eth1 && ping -c1 -W5 192.168.50.1"); rc != 0 {
		t.Errorf("guest eth1 (layer 2) → 192.168.50.1: exit %d: %s", rc, out)
	}
}
