package netsetup

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// The passt binding (KubeVirt's passtBinding, or its passt binding plugin):
// netsetup creates nothing — no tap, bridge, nftables table or DHCP server.
// passt, a user-mode program the launcher runs in the pod's network
// namespace (launcher/passt.go), hands the guest the pod's address, MAC-
// independent, over DHCP and carries its traffic through ordinary sockets
// of the pod, so the pod needs neither CAP_NET_ADMIN nor /dev/net/tun.

// planPasst: one queue (a stream netdev has no multiqueue) and the ports.
func planPasst(pi *Interface, ip *field.Path, iface v1.Interface, errs *field.ErrorList) {
	pi.Queues = 1
	pi.Bridge, pi.Tap = "", ""
	ports, perrs := portList(ip.Child("ports"), iface.Ports)
	*errs = append(*errs, perrs...)
	pi.Ports = ports
}

// probePasst: the pod interface needs an IPv4 address to hand the guest.
func probePasst(pi *Interface, pl *podLink) (*podLink, field.ErrorList, error) {
	if len(pl.addrs) == 0 {
		return nil, field.ErrorList{field.Invalid(pi.NetworkPath.Child("pod"), pi.PodInterface,
			fmt.Sprintf("the pod interface %s has no IPv4 address", pi.PodInterface))}, nil
	}
	return pl, nil, nil
}

// passtResult is what the guest will have: the pod's IPs (passt leases
// the first), the planned MAC, no taps.
func passtResult(pi *Interface, pl *podLink) InterfaceResult {
	ir := InterfaceResult{Name: pi.Name, MAC: pi.MAC.String(), InfoSource: InfoSourceDomain, Model: pi.Model,
		Passt: &PasstConfig{PodInterface: pi.PodInterface, Ports: pi.Ports}}
	for _, a := range pl.addrs {
		ir.IPs = append(ir.IPs, a.Addr().String())
	}
	ir.GuestIP = pl.addrs[0].String()
	return ir
}

// PasstConfig is how passt serves one interface.
type PasstConfig struct {
	PodInterface string // the pod interface whose address, routes and MAC the guest gets
	Ports        []Port // forwarded inbound ports; empty = every TCP and UDP port
}

// Args is passt's command line (Debian 12's passt 0.0~git20230309 and
// later): in the foreground, errors to stderr only, on the connected
// socket at fd, IPv4 only (kemu's pod network is IPv4), the pod
// interface's address, gateway and DNS, and KubeVirt's port rule: the
// listed ports, else all ("all" skips ports something in the pod already
// listens on).
func (c PasstConfig) Args(fd int) []string {
	args := []string{"--foreground", "--quiet", "--stderr", "--fd", strconv.Itoa(fd), "--ipv4-only",
		"--interface", c.PodInterface}
	var tcp, udp []string
	for _, p := range c.Ports {
		if p.Protocol == "udp" {
			udp = append(udp, strconv.Itoa(int(p.Port)))
		} else {
			tcp = append(tcp, strconv.Itoa(int(p.Port)))
		}
	}
	if len(tcp) == 0 && len(udp) == 0 {
		tcp, udp = []string{"all"}, []string{"all"}
	}
	if len(tcp) > 0 {
		args = append(args, "--tcp-ports", strings.Join(tcp, ","))
	}
	if len(udp) > 0 {
		args = append(args, "--udp-ports", strings.Join(udp, ","))
	}
	return args
}
