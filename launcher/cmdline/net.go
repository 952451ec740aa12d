package cmdline

import (
	"fmt"
	"strconv"
	"strings"
)

// NetdevTap is a tap backend on inherited fds: fd=N for one queue,
// fds=N:M:… for multiqueue; vhost=on (with vhostfd(s) when given) for
// vhost-net.
type NetdevTap struct {
	ID       string
	FDs      []int
	Vhost    bool
	VhostFDs []int // one per fd, or none (QEMU opens /dev/vhost-net)
}

// Args implements Device.
func (t NetdevTap) Args() ([]string, error) {
	if len(t.FDs) == 0 {
		return nil, fmt.Errorf("-netdev tap %s: no tap fds", t.ID)
	}
	if len(t.VhostFDs) > 0 && (!t.Vhost || len(t.VhostFDs) != len(t.FDs)) {
		return nil, fmt.Errorf("-netdev tap %s: %d vhost fds for %d tap fds (vhost=%v)", t.ID, len(t.VhostFDs), len(t.FDs), t.Vhost)
	}
	o := newOpts("tap").add("id", t.ID)
	single := len(t.FDs) == 1
	fds, err := fdList(t.FDs)
	if err != nil {
		return nil, fmt.Errorf("-netdev tap %s: %w", t.ID, err)
	}
	if single {
		o.add("fd", fds)
	} else {
		o.add("fds", fds)
	}
	if t.Vhost {
		o.add("vhost", "on")
		if len(t.VhostFDs) > 0 {
			vfds, err := fdList(t.VhostFDs)
			if err != nil {
				return nil, fmt.Errorf("-netdev tap %s: vhost: %w", t.ID, err)
			}
			if single {
				o.add("vhostfd", vfds)
			} else {
				o.add("vhostfds", vfds)
			}
		}
	}
	return o.arg("-netdev")
}

// fdList is "3:4:5"; fds 0-2 are QEMU's stdio, never a tap.
func fdList(fds []int) (string, error) {
	s := make([]string, len(fds))
	for i, fd := range fds {
		if fd < 3 {
			return "", fmt.Errorf("fd %d: inherited fds start at 3", fd)
		}
		s[i] = strconv.Itoa(fd)
	}
	return strings.Join(s, ":"), nil
}

// NetdevUser is QEMU user networking (slirp NAT): the host side is Host,
// DHCP hands out DHCPStart first, forwards are hostfwd rules.
type NetdevUser struct {
	ID, Net, Host, DHCPStart string
	Forwards                 []Forward
}

// Args implements Device.
func (u NetdevUser) Args() ([]string, error) {
	o := newOpts("user").add("id", u.ID).addNonEmpty("net", u.Net).
		addNonEmpty("host", u.Host).addNonEmpty("dhcpstart", u.DHCPStart)
	for i, f := range u.Forwards {
		proto := strings.ToLower(f.Proto)
		if proto != "tcp" && proto != "udp" {
			return nil, fmt.Errorf("-netdev user %s: forward %d: protocol %q is neither tcp nor udp", u.ID, i, f.Proto)
		}
		if f.HostPort < 1 || f.HostPort > 65535 || f.GuestPort < 1 || f.GuestPort > 65535 {
			return nil, fmt.Errorf("-netdev user %s: forward %d: ports %d->%d must be 1-65535", u.ID, i, f.HostPort, f.GuestPort)
		}
		if strings.ContainsAny(f.HostAddr, ":-") {
			return nil, fmt.Errorf("-netdev user %s: forward %d: host address %q must be IPv4", u.ID, i, f.HostAddr)
		}
		o.add("hostfwd", fmt.Sprintf("%s:%s:%d-:%d", proto, f.HostAddr, f.HostPort, f.GuestPort))
	}
	return o.arg("-netdev")
}

// NICModels maps VMI interface models to QEMU devices.
var NICModels = map[string]string{
	"virtio":  "virtio-net-pci",
	"e1000":   "e1000",
	"e1000e":  "e1000e",
	"rtl8139": "rtl8139",
}

// NetDevice is the guest NIC on a netdev. Queues > 1 (virtio only) turns
// on multiqueue with 2N+2 MSI-X vectors.
type NetDevice struct {
	Driver     string // a value of NICModels
	ID, Netdev string
	MAC        string // "" = QEMU's choice
	Queues     int
	MTU        int // host_mtu (virtio only); 0 = none
}

// Args implements Device.
func (n NetDevice) Args() ([]string, error) {
	o := newOpts(n.Driver).add("netdev", n.Netdev).add("id", n.ID).addNonEmpty("mac", n.MAC)
	if n.Queues > 1 {
		if n.Driver != NICModels["virtio"] {
			return nil, fmt.Errorf("-device %s: multiqueue needs virtio-net-pci", n.Driver)
		}
		o.add("mq", "on").addInt("vectors", 2*n.Queues+2)
	}
	if n.MTU > 0 {
		if n.Driver != NICModels["virtio"] {
			return nil, fmt.Errorf("-device %s: host_mtu needs virtio-net-pci", n.Driver)
		}
		o.addInt("host_mtu", n.MTU)
	}
	return o.arg("-device")
}
