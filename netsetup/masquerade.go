package netsetup

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// probeMasquerade: the pod interface needs an IPv4 address (the cluster
// reaches the VM there), and the guest network must not overlap any
// address or route in the namespace other than kemu's own bridge.
func probeMasquerade(h *netlink.Handle, pi *Interface, pl *podLink) (*podLink, field.ErrorList, error) {
	cidrPath := pi.NetworkPath.Child("pod", "vmNetworkCIDR")
	if len(pl.addrs) == 0 {
		return nil, field.ErrorList{field.Invalid(pi.NetworkPath.Child("pod"), pi.PodInterface,
			fmt.Sprintf("the pod interface %s has no IPv4 address", pi.PodInterface))}, nil
	}
	used, err := usedPrefixes(h, pi.Bridge)
	if err != nil {
		return nil, nil, err
	}
	if o, bad := overlapsAny(pi.VMNetwork, used); bad {
		return nil, field.ErrorList{field.Invalid(cidrPath, pi.VMNetwork.String(),
			fmt.Sprintf("overlaps the pod's network %s", o))}, nil
	}
	return pl, nil, nil
}

// usedPrefixes are the IPv4 networks of every address and non-default
// route in the namespace, except on the link named skip.
func usedPrefixes(h *netlink.Handle, skip string) ([]netip.Prefix, error) {
	links, err := h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("listing links: %w", err)
	}
	skipIndex := -1
	var out []netip.Prefix
	for _, l := range links {
		if l.Attrs().Name == skip {
			skipIndex = l.Attrs().Index
			continue
		}
		if l.Attrs().Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := ipv4Addrs(h, l)
		if err != nil {
			return nil, err
		}
		for _, a := range addrs {
			if p, ok := prefixOf(a.IPNet); ok {
				out = append(out, p.Masked())
			}
		}
	}
	routes, err := h.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		return nil, fmt.Errorf("listing routes: %w", err)
	}
	for _, r := range routes {
		if r.LinkIndex == skipIndex || r.Dst == nil {
			continue
		}
		if p, ok := prefixOf(r.Dst); ok && p.Bits() > 0 {
			out = append(out, p.Masked())
		}
	}
	return out, nil
}

func setupMasquerade(ns netns.NsHandle, h *netlink.Handle, p *Plan, pi *Interface, pl *podLink) (InterfaceResult, *Lease, error) {
	mtu := pl.link.Attrs().MTU
	br, err := ensureBridge(h, pi.Bridge, mtu, DeriveMAC(pi.MAC.String(), "gateway"), "")
	if err != nil {
		return InterfaceResult{}, nil, err
	}
	gw := &netlink.Addr{IPNet: &net.IPNet{IP: pi.Gateway.AsSlice(), Mask: net.CIDRMask(pi.VMNetwork.Bits(), 32)}}
	if err := ensureAddr(h, br, gw); err != nil {
		return InterfaceResult{}, nil, err
	}
	if err := setForwarding(ns); err != nil {
		return InterfaceResult{}, nil, err
	}
	var podIPs []netip.Addr
	var ips []string
	for _, a := range pl.addrs {
		podIPs = append(podIPs, a.Addr())
		ips = append(ips, a.Addr().String())
	}
	t := natTable{Name: pi.Table, PodIface: pi.PodInterface, PodIPs: podIPs, GuestIP: pi.GuestIP, VMNetwork: pi.VMNetwork, Ports: pi.Ports}
	if err := t.apply(ns); err != nil {
		return InterfaceResult{}, nil, err
	}
	fds, err := ensureTap(ns, h, pi.Tap, pi.Queues, p.TapUID, p.TapGID, mtu, br)
	if err != nil {
		return InterfaceResult{}, nil, err
	}
	guest := netip.PrefixFrom(pi.GuestIP, pi.VMNetwork.Bits())
	return InterfaceResult{
			Name: pi.Name, MAC: pi.MAC.String(), IPs: ips, GuestIP: guest.String(), InfoSource: InfoSourceDomain,
			MTU: mtu, Tap: pi.Tap, Model: pi.Model, TapFDs: fds,
		}, &Lease{
			MAC: pi.MAC, IP: guest, Router: pi.Gateway, ServerID: pi.Gateway, MTU: mtu,
		}, nil
}

func teardownMasquerade(ns netns.NsHandle, h *netlink.Handle, pi *Interface) error {
	if err := deleteTable(ns, pi.Table); err != nil {
		return err
	}
	if err := deleteLink(h, pi.Tap); err != nil {
		return err
	}
	return deleteLink(h, pi.Bridge)
}

// prefixOf converts an IPv4 net.IPNet (address and mask) to a prefix.
func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	a = a.Unmap()
	ones, bits := n.Mask.Size()
	if !a.Is4() || (bits != 32 && bits != 128) {
		return netip.Prefix{}, false
	}
	if bits == 128 {
		ones -= 96
	}
	return netip.PrefixFrom(a, ones), true
}
