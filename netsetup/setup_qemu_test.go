//go:build qemu

package netsetup

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"

	"github.com/kemu-dev/kemu/netsetup/nsthread"
)

const resolvConf = "search ns1.svc.cluster.local svc.cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n"

func writeResolvConf(t testing.TB) string {
	p := filepath.Join(t.TempDir(), "resolv.conf")
	must(t, os.WriteFile(p, []byte(resolvConf), 0o644), "resolv.conf")
	return p
}

// plan builds a plan for a defaulted VMI changed by mut, in e's pod netns.
func (e *podEnv) plan(t testing.TB, mut func(*v1.VirtualMachineInstance), opts Options) *Plan {
	t.Helper()
	opts.NetNSPath = e.Path
	opts.TapUID, opts.TapGID = 107, 107
	if opts.ResolvConf == "" {
		opts.ResolvConf = writeResolvConf(t)
	}
	p, errs := NewPlan(testVMI(mut), opts)
	if len(errs) > 0 {
		t.Fatalf("plan: %v", errs.ToAggregate())
	}
	return p
}

func (e *podEnv) setup(t testing.TB, p *Plan) *Result {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r, err := Setup(ctx, p)
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// fakeGuest is a namespace whose eth0 (MAC mac) hangs off the bridge like a
// guest NIC behind the tap: a quick stand-in for the VM.
type fakeGuest struct {
	ns   netns.NsHandle
	port string // its veth end in the pod namespace
}

func (e *podEnv) fakeGuest(t testing.TB, bridge string, mac net.HardwareAddr) *fakeGuest {
	t.Helper()
	g := &fakeGuest{ns: newNamedNS(t, e.Name+"g"), port: "kg-" + e.Name[2:8]}
	hp, hg := handle(t, e.Pod), handle(t, g.ns)
	attrs := netlink.NewLinkAttrs()
	attrs.Name, attrs.MTU = g.port, podMTU
	must(t, hp.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: "eth0", PeerHardwareAddr: mac, PeerNamespace: netlink.NsFd(g.ns)}), "guest veth")
	port, err := hp.LinkByName(g.port)
	must(t, err, "guest port")
	br, err := hp.LinkByName(bridge)
	must(t, err, "bridge")
	must(t, hp.LinkSetMaster(port, br), "enslave guest port")
	must(t, hp.LinkSetUp(port), "guest port up")
	for _, n := range []string{"lo", "eth0"} {
		l, err := hg.LinkByName(n)
		must(t, err, "link %s", n)
		must(t, hg.LinkSetUp(l), "%s up", n)
	}
	return g
}

// dhcp runs a DHCP exchange from the guest's eth0 and, with apply, takes
// the lease: address and default route.
func (g *fakeGuest) dhcp(t testing.TB, apply bool) *nclient4.Lease {
	t.Helper()
	var c *nclient4.Client
	must(t, nsthread.Do(g.ns, func() (err error) {
		c, err = nclient4.New("eth0", nclient4.WithTimeout(2*time.Second), nclient4.WithRetry(5))
		return err
	}), "DHCP client")
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lease, err := c.Request(ctx, dhcpv4.WithRequestedOptions(dhcpv4.OptionInterfaceMTU, dhcpv4.OptionClasslessStaticRoute, dhcpv4.OptionDNSDomainSearchList))
	must(t, err, "DHCP")
	if apply {
		h := handle(t, g.ns)
		eth0, err := h.LinkByName("eth0")
		must(t, err, "eth0")
		ones, _ := lease.ACK.SubnetMask().Size()
		must(t, h.AddrReplace(eth0, &netlink.Addr{IPNet: &net.IPNet{IP: lease.ACK.YourIPAddr, Mask: net.CIDRMask(ones, 32)}}), "guest address")
		must(t, h.RouteReplace(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: lease.ACK.Router()[0]}), "guest default route")
	}
	return lease
}

func (g *fakeGuest) remove(t testing.TB, e *podEnv) {
	must(t, deleteLink(handle(t, e.Pod), g.port), "removing the fake guest")
}

func checkOptions(t *testing.T, ack *dhcpv4.DHCPv4, ip string, ones int, router string) {
	t.Helper()
	if got, _ := ack.SubnetMask().Size(); !ack.YourIPAddr.Equal(net.ParseIP(ip)) || got != ones {
		t.Errorf("leased %s/%d, want %s/%d", ack.YourIPAddr, got, ip, ones)
	}
	if r := ack.Router(); len(r) != 1 || r[0].String() != router {
		t.Errorf("router %v, want %s", r, router)
	}
	if d := ack.DNS(); len(d) != 1 || d[0].String() != "10.96.0.10" {
		t.Errorf("DNS %v", d)
	}
	if s := ack.DomainSearch(); s == nil || !slices.Equal(s.Labels, []string{"ns1.svc.cluster.local", "svc.cluster.local"}) {
		t.Errorf("search %v", s)
	}
	if mtu := ack.GetOneOption(dhcpv4.OptionInterfaceMTU); len(mtu) != 2 || int(mtu[0])<<8|int(mtu[1]) != podMTU {
		t.Errorf("MTU option %v, want %d", mtu, podMTU)
	}
	if ack.HostName() != "vm1" || ack.IPAddressLeaseTime(0) != InfiniteLease {
		t.Errorf("host name %q, lease %v", ack.HostName(), ack.IPAddressLeaseTime(0))
	}
}

// checkTap: the tap is ours, enslaved to the bridge, with the pod MTU, and
// every fd is a queue with the right flags.
func checkTap(t *testing.T, e *podEnv, ir InterfaceResult, bridge string, queues int) {
	t.Helper()
	h := handle(t, e.Pod)
	tap, err := h.LinkByName(ir.Tap)
	must(t, err, "tap")
	br, err := h.LinkByName(bridge)
	must(t, err, "bridge")
	if tap.Attrs().MTU != podMTU || tap.Attrs().MasterIndex != br.Attrs().Index || ir.MTU != podMTU {
		t.Errorf("tap MTU %d master %d (bridge %d), result MTU %d", tap.Attrs().MTU, tap.Attrs().MasterIndex, br.Attrs().Index, ir.MTU)
	}
	if tt, ok := tap.(*netlink.Tuntap); !ok || tt.Owner != 107 || tt.Group != 107 {
		t.Errorf("tap %T %+v: want owner and group 107", tap, tap)
	}
	if len(ir.TapFDs) != queues {
		t.Fatalf("%d tap fds, want %d", len(ir.TapFDs), queues)
	}
	for _, f := range ir.TapFDs {
		flags, err := tapFlagsOf(f)
		must(t, err, "TUNGETIFF")
		if want := tapFlags(queues); flags&want != want || (queues == 1) != (flags&unix.IFF_MULTI_QUEUE == 0) {
			t.Errorf("tap flags %#x, want %#x", flags, want)
		}
	}
}

// checkClean: only what the test made is left: no kemu link, table or
// DHCP server.
func checkClean(t *testing.T, e *podEnv, r *Result) {
	t.Helper()
	if ls := links(t, e.Pod); !slices.Equal(ls, []string{"lo", "eth0"}) {
		t.Errorf("links left: %v", ls)
	}
	if ts := tables(t, e.Pod); len(ts) != 0 {
		t.Errorf("nftables tables left: %v", ts)
	}
	if r != nil {
		for _, s := range r.servers {
			select {
			case <-s.done:
			default:
				t.Errorf("DHCP server on %s still running", s.iface)
			}
		}
		for _, ir := range r.Interfaces {
			for _, f := range ir.TapFDs {
				if f.Fd() != ^uintptr(0) {
					t.Errorf("tap fd %s still open", f.Name())
				}
			}
		}
	}
}

func TestMasqueradeFakeGuest(t *testing.T) {
	t.Parallel()
	e := newPodEnv(t)
	p := e.plan(t, func(vmi *v1.VirtualMachineInstance) {
		vmi.Spec.Domain.Devices.Interfaces[0].Ports = []v1.Port{{Port: 8080}}
	}, Options{})
	pi := p.Interfaces[0]
	r := e.setup(t, p)
	ir := r.Interfaces[0]
	if ir.Name != "default" || ir.MAC != pi.MAC.String() || !slices.Equal(ir.IPs, []string{podIP}) || ir.GuestIP != "10.0.2.2/24" || ir.InfoSource != "domain" {
		t.Errorf("result %+v", ir)
	}
	checkTap(t, e, ir, pi.Bridge, 1)
	if ts := tables(t, e.Pod); !slices.Equal(ts, []string{"kemu-eth0"}) {
		t.Errorf("tables %v", ts)
	}
	rules := ruleCount(t, e.Pod, "kemu-eth0")

	g := e.fakeGuest(t, pi.Bridge, pi.MAC)
	lease := g.dhcp(t, true)
	checkOptions(t, lease.ACK, "10.0.2.2", 24, "10.0.2.1")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Out: the node and beyond see the pod IP (masquerade).
	listen(t, e.Node, nodeIP+":9000", "node")
	listen(t, e.Node, outsideIP+":9001", "outside")
	for addr, want := range map[string]string{nodeIP + ":9000": "node from " + podIP, outsideIP + ":9001": "outside from " + podIP} {
		if got, err := get(ctx, g.ns, addr); err != nil || got != want {
			t.Errorf("guest → %s: %q, %v; want %q", addr, got, err, want)
		}
	}
	// In: the listed port reaches the guest at the pod IP, others do not.
	listen(t, g.ns, ":8080", "guest")
	listen(t, g.ns, ":8081", "guest")
	if got, err := get(ctx, e.Node, podIP+":8080"); err != nil || got != "guest from "+nodeIP {
		t.Errorf("node → pod IP:8080: %q, %v", got, err)
	}
	if got, err := get(ctx, e.Node, podIP+":8081"); err == nil {
		t.Errorf("node → pod IP:8081 (not forwarded) reached %q", got)
	}
	// From inside the pod (the output chain) as well.
	if got, err := get(ctx, e.Pod, podIP+":8080"); err != nil || got != "guest from "+podIP {
		t.Errorf("pod → pod IP:8080: %q, %v", got, err)
	}

	// A launcher restart: the old one's servers and fds are gone, the
	// links and rules stay; Setup again reuses them.
	before := links(t, e.Pod)
	bridgeIndex := linkIndex(t, e.Pod, pi.Bridge)
	r.Close()
	r2 := e.setup(t, p)
	if after := links(t, e.Pod); !slices.Equal(before, after) || linkIndex(t, e.Pod, pi.Bridge) != bridgeIndex {
		t.Errorf("links after the second Setup %v, before %v", after, before)
	}
	if ts := tables(t, e.Pod); !slices.Equal(ts, []string{"kemu-eth0"}) || ruleCount(t, e.Pod, "kemu-eth0") != rules {
		t.Errorf("tables %v with %d rules, want one with %d", ts, ruleCount(t, e.Pod, "kemu-eth0"), rules)
	}
	checkTap(t, e, r2.Interfaces[0], pi.Bridge, 1)
	checkOptions(t, g.dhcp(t, false).ACK, "10.0.2.2", 24, "10.0.2.1")
	if got, err := get(ctx, e.Node, podIP+":8080"); err != nil || got != "guest from "+nodeIP {
		t.Errorf("after the second Setup, node → pod IP:8080: %q, %v", got, err)
	}

	g.remove(t, e)
	must(t, r2.Teardown(ctx), "Teardown")
	checkClean(t, e, r2)
	must(t, r2.Teardown(ctx), "second Teardown")
	must(t, Teardown(ctx, p), "Teardown by plan of nothing")
}

func linkIndex(t testing.TB, ns netns.NsHandle, name string) int {
	l, err := handle(t, ns).LinkByName(name)
	must(t, err, "link %s", name)
	return l.Attrs().Index
}

func TestBridgeFakeGuest(t *testing.T) {
	t.Parallel()
	e := newPodEnv(t)
	p := e.plan(t, func(vmi *v1.VirtualMachineInstance) {
		vmi.Spec.Domain.Devices.Interfaces[0].Masquerade = nil
		vmi.Spec.Domain.Devices.Interfaces[0].Bridge = &v1.InterfaceBridge{}
	}, Options{})
	pi := p.Interfaces[0]
	r := e.setup(t, p)
	ir := r.Interfaces[0]
	if ir.MAC != e.PodMAC.String() || !slices.Equal(ir.IPs, []string{podIP}) || ir.GuestIP != podCIDR {
		t.Errorf("result %+v, want the pod's MAC %s and IP %s", ir, e.PodMAC, podCIDR)
	}
	checkTap(t, e, ir, pi.Bridge, 1)
	h := handle(t, e.Pod)
	eth0, err := h.LinkByName("eth0")
	must(t, err, "eth0")
	addrs, _ := h.AddrList(eth0, netlink.FAMILY_V4)
	if eth0.Attrs().HardwareAddr.String() != pi.PodMAC.String() || len(addrs) != 0 || eth0.Attrs().MasterIndex != linkIndex(t, e.Pod, pi.Bridge) {
		t.Errorf("pod eth0: MAC %s (want %s), addresses %v, master %d", eth0.Attrs().HardwareAddr, pi.PodMAC, addrs, eth0.Attrs().MasterIndex)
	}
	if ts := tables(t, e.Pod); len(ts) != 0 {
		t.Errorf("bridge binding made tables %v", ts)
	}

	g := e.fakeGuest(t, pi.Bridge, e.PodMAC)
	checkOptions(t, g.dhcp(t, true).ACK, podIP, 24, nodeIP)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	listen(t, g.ns, ":8080", "guest")
	if got, err := get(ctx, e.Node, podIP+":8080"); err != nil || got != "guest from "+nodeIP {
		t.Errorf("node → pod IP:8080: %q, %v", got, err)
	}
	listen(t, e.Node, outsideIP+":9001", "outside")
	if got, err := get(ctx, g.ns, outsideIP+":9001"); err != nil || got != "outside from "+podIP {
		t.Errorf("guest → outside: %q, %v", got, err)
	}

	// Restart: the pod interface has lost its address; the bridge's alias
	// remembers it.
	before := links(t, e.Pod)
	r.Close()
	r2 := e.setup(t, p)
	if after := links(t, e.Pod); !slices.Equal(before, after) {
		t.Errorf("links after the second Setup %v, before %v", after, before)
	}
	if ir := r2.Interfaces[0]; ir.MAC != e.PodMAC.String() || ir.GuestIP != podCIDR {
		t.Errorf("second result %+v", ir)
	}
	checkOptions(t, g.dhcp(t, false).ACK, podIP, 24, nodeIP)

	g.remove(t, e)
	must(t, r2.Teardown(ctx), "Teardown")
	checkClean(t, e, r2)
	checkPodRestored(t, e)
}

// checkPodRestored: eth0 has its MAC, address and default route back.
func checkPodRestored(t *testing.T, e *podEnv) {
	t.Helper()
	h := handle(t, e.Pod)
	eth0, err := h.LinkByName("eth0")
	must(t, err, "eth0")
	addrs, _ := h.AddrList(eth0, netlink.FAMILY_V4)
	routes, _ := h.RouteList(eth0, netlink.FAMILY_V4)
	var gw string
	for _, r := range routes {
		if r.Gw != nil {
			gw = r.Gw.String()
		}
	}
	if eth0.Attrs().HardwareAddr.String() != e.PodMAC.String() || len(addrs) != 1 || addrs[0].IPNet.String() != podCIDR ||
		gw != nodeIP || eth0.Attrs().MasterIndex != 0 || eth0.Attrs().OperState == netlink.OperDown {
		t.Errorf("eth0 not restored: MAC %s (want %s), addresses %v, gateway %q, master %d, state %s",
			eth0.Attrs().HardwareAddr, e.PodMAC, addrs, gw, eth0.Attrs().MasterIndex, eth0.Attrs().OperState)
	}
}

func TestMultiqueueTap(t *testing.T) {
	t.Parallel()
	e := newPodEnv(t)
	four := e.plan(t, func(vmi *v1.VirtualMachineInstance) { vmi.Spec.Domain.CPU.Cores = 4 }, Options{Multiqueue: ptr(true)})
	r := e.setup(t, four)
	checkTap(t, e, r.Interfaces[0], four.Interfaces[0].Bridge, 4)
	r.Close()
	// The VMI changed its vCPUs: the tap is recreated with two queues.
	two := e.plan(t, func(vmi *v1.VirtualMachineInstance) { vmi.Spec.Domain.CPU.Cores = 2 }, Options{Multiqueue: ptr(true)})
	r = e.setup(t, two)
	checkTap(t, e, r.Interfaces[0], two.Interfaces[0].Bridge, 2)
	must(t, r.Teardown(context.Background()), "Teardown")
	checkClean(t, e, r)
}

// Bad input is reported with the field at fault, and nothing is created.
func TestSetupBadInput(t *testing.T) {
	t.Parallel()
	e := newPodEnv(t)
	for _, tc := range []struct {
		name string
		mut  func(*v1.VirtualMachineInstance)
		opts Options
		want []string
	}{
		{name: "missing pod interface", opts: Options{PodInterface: "eth9"},
			want: []string{"spec.networks[0].pod", "eth9", "not in the pod network namespace"}},
		{name: "CIDR overlaps the pod network", mut: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Networks[0].Pod.VMNetworkCIDR = "10.244.0.0/16"
		}, want: []string{"spec.networks[0].pod.vmNetworkCIDR", "overlaps the pod's network 10.244.1.0/24"}},
		{name: "CIDR overlaps a pod route", mut: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Networks[0].Pod.VMNetworkCIDR = "10.96.0.0/24"
		}, want: []string{"spec.networks[0].pod.vmNetworkCIDR", "overlaps the pod's network 10.96.0.0/12"}},
		{name: "bridge, missing pod interface", opts: Options{PodInterface: "net1"}, mut: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Interfaces[0].Masquerade = nil
			vmi.Spec.Domain.Devices.Interfaces[0].Bridge = &v1.InterfaceBridge{}
		}, want: []string{"spec.networks[0].pod", "net1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := handle(t, e.Pod)
			eth0, _ := h.LinkByName("eth0")
			if tc.name == "CIDR overlaps a pod route" {
				must(t, h.RouteReplace(&netlink.Route{LinkIndex: eth0.Attrs().Index, Dst: &net.IPNet{IP: net.ParseIP("10.96.0.0"), Mask: net.CIDRMask(12, 32)}, Gw: net.ParseIP(nodeIP)}), "service route")
				defer h.RouteDel(&netlink.Route{LinkIndex: eth0.Attrs().Index, Dst: &net.IPNet{IP: net.ParseIP("10.96.0.0"), Mask: net.CIDRMask(12, 32)}, Gw: net.ParseIP(nodeIP)})
			}
			p := e.plan(t, tc.mut, tc.opts)
			r, err := Setup(context.Background(), p)
			if err == nil {
				r.Teardown(context.Background())
				t.Fatalf("Setup succeeded, want %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			checkClean(t, e, nil)
		})
	}
}

// A failure half-way (the DHCP port is taken) undoes everything.
func TestSetupFailureUndoes(t *testing.T) {
	t.Parallel()
	for _, binding := range []Binding{BindingMasquerade, BindingBridge} {
		t.Run(string(binding), func(t *testing.T) {
			e := newPodEnv(t)
			var blocker net.PacketConn
			must(t, nsthread.Do(e.Pod, func() (err error) { blocker, err = net.ListenPacket("udp4", ":67"); return err }), "taking port 67")
			defer blocker.Close()
			p := e.plan(t, func(vmi *v1.VirtualMachineInstance) {
				if binding == BindingBridge {
					vmi.Spec.Domain.Devices.Interfaces[0].Masquerade = nil
					vmi.Spec.Domain.Devices.Interfaces[0].Bridge = &v1.InterfaceBridge{}
				}
			}, Options{})
			r, err := Setup(context.Background(), p)
			if err == nil {
				r.Teardown(context.Background())
				t.Fatal("Setup succeeded with port 67 taken")
			}
			if !strings.Contains(err.Error(), "DHCP server on kbr-eth0") {
				t.Errorf("error %v", err)
			}
			checkClean(t, e, nil)
			checkPodRestored(t, e)
		})
	}
}
