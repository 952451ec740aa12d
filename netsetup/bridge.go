package netsetup

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"
)

// BridgeServerIP is the address the bridge of a bridge binding holds so the
// DHCP server can send from it (as KubeVirt's 169.254.75.10); it is the
// lease's server identifier.
var BridgeServerIP = netip.MustParseAddr("169.254.75.10")

// probeBridge finds what the guest takes over: recorded on kemu's bridge by
// an earlier Setup, or the pod interface's IPv4 address, routes and MAC.
func probeBridge(h *netlink.Handle, pi *Interface, pl *podLink) (*podLink, field.ErrorList, error) {
	br, err := linkByName(h, pi.Bridge)
	if err != nil {
		return nil, nil, err
	}
	if br != nil {
		st, ok, err := decodePodState(br.Attrs().Alias)
		if err != nil {
			return nil, nil, err
		}
		if ok && st.l2Only() && !pi.Secondary {
			return nil, nil, fmt.Errorf("bridge %s: its alias records no pod address, but %s is the primary pod interface", pi.Bridge, pi.PodInterface)
		}
		if ok {
			pl.state = st
			return pl, nil, nil
		}
	}
	if len(pl.addrs) == 0 && !pi.Secondary {
		return nil, field.ErrorList{field.Invalid(pi.sourcePath(), pi.PodInterface,
			fmt.Sprintf("the pod interface %s has no IPv4 address for the guest to take", pi.PodInterface))}, nil
	}
	st := &podState{MAC: pl.link.Attrs().HardwareAddr.String()}
	for _, a := range pl.addrs {
		st.Addrs = append(st.Addrs, a.String())
	}
	routes, err := h.RouteListFiltered(netlink.FAMILY_V4,
		&netlink.Route{LinkIndex: pl.link.Attrs().Index, Table: unix.RT_TABLE_MAIN},
		netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, nil, fmt.Errorf("listing routes of %s: %w", pi.PodInterface, err)
	}
	for _, r := range routes {
		if r.Protocol == unix.RTPROT_KERNEL || r.Type != unix.RTN_UNICAST {
			continue // the subnet route comes back with the address
		}
		sr := stateRoute{Dst: "0.0.0.0/0"}
		if p, ok := prefixOf(r.Dst); ok {
			sr.Dst = p.Masked().String()
		}
		if gw, ok := netip.AddrFromSlice(r.Gw); ok && r.Gw != nil {
			sr.GW = gw.Unmap().String()
		}
		st.Routes = append(st.Routes, sr)
	}
	if _, err := st.encode(); err != nil {
		return nil, nil, fmt.Errorf("pod interface %s: %w", pi.PodInterface, err)
	}
	pl.state = st
	return pl, nil, nil
}

func setupBridge(ns netns.NsHandle, h *netlink.Handle, p *Plan, pi *Interface, pl *podLink) (InterfaceResult, *Lease, error) {
	st := pl.state
	alias, err := st.encode()
	if err != nil {
		return InterfaceResult{}, nil, err
	}
	pod := pl.link
	mtu := pod.Attrs().MTU
	// The alias goes on first: from here on teardown can restore the pod
	// interface, whatever fails.
	br, err := ensureBridge(h, pi.Bridge, mtu, DeriveMAC(pi.PodMAC.String(), "bridge"), alias)
	if err != nil {
		return InterfaceResult{}, nil, err
	}
	if !st.l2Only() {
		if err := ensureAddr(h, br, &netlink.Addr{IPNet: &net.IPNet{IP: BridgeServerIP.AsSlice(), Mask: net.CIDRMask(32, 32)}}); err != nil {
			return InterfaceResult{}, nil, err
		}
	}
	for _, a := range pl.addrs {
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: a.Addr().AsSlice(), Mask: net.CIDRMask(a.Bits(), 32)}}
		if err := h.AddrDel(pod, addr); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return InterfaceResult{}, nil, fmt.Errorf("removing %s from %s: %w", a, pi.PodInterface, err)
		}
	}
	guestMAC := pi.MAC
	if guestMAC == nil {
		if guestMAC, err = net.ParseMAC(st.MAC); err != nil {
			return InterfaceResult{}, nil, err
		}
	}
	if pod.Attrs().HardwareAddr.String() == guestMAC.String() {
		// The guest takes the pod's MAC; the pod interface takes another.
		if err := h.LinkSetDown(pod); err != nil {
			return InterfaceResult{}, nil, fmt.Errorf("setting %s down: %w", pi.PodInterface, err)
		}
		if err := h.LinkSetHardwareAddr(pod, pi.PodMAC); err != nil {
			return InterfaceResult{}, nil, fmt.Errorf("setting the MAC of %s: %w", pi.PodInterface, err)
		}
	}
	if pod.Attrs().MasterIndex != br.Attrs().Index {
		if err := h.LinkSetMaster(pod, br); err != nil {
			return InterfaceResult{}, nil, fmt.Errorf("enslaving %s to %s: %w", pi.PodInterface, pi.Bridge, err)
		}
	}
	if err := h.LinkSetUp(pod); err != nil {
		return InterfaceResult{}, nil, fmt.Errorf("setting %s up: %w", pi.PodInterface, err)
	}
	fds, err := ensureTap(ns, h, pi.Tap, pi.Queues, p.TapUID, p.TapGID, mtu, br)
	if err != nil {
		return InterfaceResult{}, nil, err
	}
	res := InterfaceResult{
		Name: pi.Name, MAC: guestMAC.String(), InfoSource: InfoSourceDomain,
		MTU: mtu, Tap: pi.Tap, Model: pi.Model, TapFDs: fds,
	}
	if st.l2Only() {
		return res, nil, nil // layer 2 only: no address to lease
	}
	ip, router, routes := st.lease()
	var ips []string
	for _, a := range st.Addrs {
		ips = append(ips, netip.MustParsePrefix(a).Addr().String())
	}
	res.IPs, res.GuestIP = ips, ip.String()
	return res, &Lease{
		MAC: guestMAC, IP: ip, Router: router, ServerID: BridgeServerIP, MTU: mtu, Routes: routes,
	}, nil
}

// teardownBridge gives the pod interface back its MAC, addresses and routes
// (from the bridge's alias) and removes the tap and the bridge.
func teardownBridge(h *netlink.Handle, pi *Interface) error {
	if err := deleteLink(h, pi.Tap); err != nil {
		return err
	}
	br, err := linkByName(h, pi.Bridge)
	if err != nil || br == nil {
		return err
	}
	st, _, err := decodePodState(br.Attrs().Alias)
	if err != nil {
		return err
	}
	pod, err := linkByName(h, pi.PodInterface)
	if err != nil {
		return err
	}
	if pod != nil {
		if pod.Attrs().MasterIndex == br.Attrs().Index {
			if err := h.LinkSetNoMaster(pod); err != nil {
				return fmt.Errorf("releasing %s from %s: %w", pi.PodInterface, pi.Bridge, err)
			}
		}
		if st != nil {
			if err := restorePod(h, pod, st); err != nil {
				return fmt.Errorf("restoring %s: %w", pi.PodInterface, err)
			}
		}
	}
	return deleteLink(h, pi.Bridge)
}

func restorePod(h *netlink.Handle, pod netlink.Link, st *podState) error {
	mac, err := net.ParseMAC(st.MAC)
	if err != nil {
		return err
	}
	if pod.Attrs().HardwareAddr.String() != mac.String() {
		if err := h.LinkSetDown(pod); err != nil {
			return err
		}
		if err := h.LinkSetHardwareAddr(pod, mac); err != nil {
			return fmt.Errorf("setting MAC %s: %w", mac, err)
		}
	}
	if err := h.LinkSetUp(pod); err != nil {
		return err
	}
	for _, a := range st.Addrs {
		pfx := netip.MustParsePrefix(a)
		if err := ensureAddr(h, pod, &netlink.Addr{IPNet: &net.IPNet{IP: pfx.Addr().AsSlice(), Mask: net.CIDRMask(pfx.Bits(), 32)}}); err != nil {
			return err
		}
	}
	// On-link routes first: a gateway must be reachable before routes via it.
	for _, pass := range []bool{false, true} {
		for _, r := range st.Routes {
			if (r.GW != "") != pass {
				continue
			}
			dst := netip.MustParsePrefix(r.Dst)
			route := &netlink.Route{LinkIndex: pod.Attrs().Index, Dst: &net.IPNet{IP: dst.Addr().AsSlice(), Mask: net.CIDRMask(dst.Bits(), 32)}}
			if r.GW != "" {
				route.Gw = netip.MustParseAddr(r.GW).AsSlice()
			} else {
				route.Scope = netlink.SCOPE_LINK
			}
			if err := h.RouteReplace(route); err != nil {
				return fmt.Errorf("route %s via %q: %w", r.Dst, r.GW, err)
			}
		}
	}
	klog.V(2).InfoS("Restored pod interface", "link", pod.Attrs().Name, "mac", st.MAC, "addrs", st.Addrs)
	return nil
}
