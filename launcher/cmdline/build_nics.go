package cmdline

import (
	"fmt"
	"net"
	"net/netip"
)

// nics: one backend (tap fds or user networking) and one guest NIC per VMI
// interface, in order.
func (b *builder) nics() {
	ifaces := b.vmi.Spec.Domain.Devices.Interfaces
	if len(b.in.NICs) != len(ifaces) {
		b.fail("Input.NICs", "%d NICs for %d interfaces in spec.domain.devices.interfaces", len(b.in.NICs), len(ifaces))
		return
	}
	for i, iface := range ifaces {
		nic := b.in.NICs[i]
		np := fmt.Sprintf("Input.NICs[%d]", i)
		ip := fmt.Sprintf("spec.domain.devices.interfaces[%d]", i)
		if nic.Name != iface.Name {
			b.fail(np+".Name", "%q, but interface %d is %q", nic.Name, i, iface.Name)
			return
		}
		model, modelField := nic.Model, np+".Model"
		if model == "" {
			model, modelField = iface.Model, ip+".model"
		}
		if model == "" {
			model = "virtio"
		}
		driver, ok := NICModels[model]
		if !ok {
			b.fail(modelField, "%q: must be virtio, e1000, e1000e or rtl8139", model)
			return
		}
		virtio := model == "virtio"
		mac, macField := nic.MAC, np+".MAC"
		if mac == "" {
			mac, macField = iface.MacAddress, ip+".macAddress"
		}
		if mac != "" {
			hw, err := net.ParseMAC(mac)
			if err != nil || len(hw) != 6 {
				b.fail(macField, "%q is not a 48-bit MAC address", mac)
				return
			}
			mac = hw.String()
		}

		netdev, id := NetdevID(iface.Name), NICDeviceID(iface.Name)
		b.claimID(id, ip+".name")
		dev := NetDevice{Driver: driver, ID: id, Netdev: netdev, MAC: mac}
		switch {
		case nic.MTU < 0 || nic.MTU > 65535 || (nic.MTU > 0 && nic.MTU < 68):
			b.fail(np+".MTU", "%d is not an MTU (68..65535)", nic.MTU)
		case nic.MTU > 0 && virtio:
			dev.MTU = nic.MTU
		}
		switch {
		case nic.PasstFD != 0:
			b.passtNetdev(np, netdev, nic)
		case len(nic.TapFDs) > 0 && nic.User != nil:
			b.fail(np, "both TapFDs and User set")
			return
		case len(nic.TapFDs) > 0:
			switch {
			case len(nic.VhostFDs) > 0 && !b.in.Facts.VhostNet:
				b.fail(np+".VhostFDs", "given, but Facts.VhostNet is false")
			case len(nic.VhostFDs) > 0 && !virtio:
				b.fail(np+".VhostFDs", "vhost-net needs model virtio, not %s", model)
			case len(nic.VhostFDs) > 0 && len(nic.VhostFDs) != len(nic.TapFDs):
				b.fail(np+".VhostFDs", "%d vhost fds for %d tap fds", len(nic.VhostFDs), len(nic.TapFDs))
			case len(nic.TapFDs) > 1 && !virtio:
				b.fail(np+".TapFDs", "%d queues: multiqueue needs model virtio, not %s", len(nic.TapFDs), model)
			}
			b.add(np, NetdevTap{ID: netdev, FDs: nic.TapFDs, Vhost: b.in.Facts.VhostNet && virtio, VhostFDs: nic.VhostFDs})
			dev.Queues = len(nic.TapFDs)
		case nic.User != nil:
			u, err := userNet(netdev, nic.User)
			if err != nil {
				b.fail(np+".User", "%v", err)
				return
			}
			b.add(np+".User", u)
		default:
			b.fail(np, "neither TapFDs nor User set")
			return
		}
		b.add(ip, dev)
	}
}

// userNet: the host side gets the network's first address, the guest (the
// first DHCP lease) its second, as KubeVirt's masquerade does.
func userNet(id string, u *UserNet) (NetdevUser, error) {
	cidr := u.Net
	if cidr == "" {
		cidr = DefaultUserNet
	}
	pfx, err := netip.ParsePrefix(cidr)
	if err != nil || !pfx.Addr().Is4() {
		return NetdevUser{}, fmt.Errorf("user network %q is not an IPv4 CIDR", cidr)
	}
	if pfx.Bits() > 30 {
		return NetdevUser{}, fmt.Errorf("user network %q: the prefix must be /30 or shorter", cidr)
	}
	pfx = pfx.Masked()
	host := pfx.Addr().Next()
	guest := host.Next()
	for i, f := range u.Forwards {
		if f.HostAddr != "" {
			if a, err := netip.ParseAddr(f.HostAddr); err != nil || !a.Is4() {
				return NetdevUser{}, fmt.Errorf("Forwards[%d].HostAddr %q is not an IPv4 address", i, f.HostAddr)
			}
		}
	}
	return NetdevUser{ID: id, Net: pfx.String(), Host: host.String(), DHCPStart: guest.String(), Forwards: u.Forwards}, nil
}
