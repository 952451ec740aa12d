package local

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/launcher/cmdline"
)

// standaloneNICs maps the VMI's pod network to QEMU user networking.
func standaloneNICs(vmi *v1.VirtualMachineInstance, publish []string) ([]cmdline.NIC, error) {
	var fwd []cmdline.Forward
	for _, p := range publish {
		f, err := parsePublish(p)
		if err != nil {
			return nil, err
		}
		fwd = append(fwd, f)
	}
	nets := map[string]*v1.Network{}
	for i := range vmi.Spec.Networks {
		nets[vmi.Spec.Networks[i].Name] = &vmi.Spec.Networks[i]
	}
	if mq := vmi.Spec.Domain.Devices.NetworkInterfaceMultiqueue; mq != nil && *mq && len(vmi.Spec.Domain.Devices.Interfaces) > 0 {
		return nil, errors.New("spec.domain.devices.networkInterfaceMultiqueue: kemuctl run uses QEMU user networking, which has one queue (multiqueue needs taps: run the VMI on a cluster)")
	}
	var nics []cmdline.NIC
	for i, iface := range vmi.Spec.Domain.Devices.Interfaces {
		if iface.Masquerade == nil {
			return nil, fmt.Errorf("spec.domain.devices.interfaces[%d]: kemuctl run supports the masquerade binding only (bridge needs a pod network)", i)
		}
		cidr := "10.0.2.0/24"
		if n := nets[iface.Name]; n != nil && n.Pod != nil && n.Pod.VMNetworkCIDR != "" {
			cidr = n.Pod.VMNetworkCIDR
		}
		nic := cmdline.NIC{Name: iface.Name, MAC: iface.MacAddress, Model: iface.Model,
			User: &cmdline.UserNet{Net: cidr}}
		if len(nics) == 0 {
			nic.User.Forwards = fwd
		}
		nics = append(nics, nic)
	}
	if len(fwd) > 0 && len(nics) == 0 {
		return nil, errors.New("--publish: the VMI has no masquerade interface")
	}
	return nics, nil
}

// parsePublish parses [ADDR:]HOSTPORT:GUESTPORT[/udp].
func parsePublish(s string) (cmdline.Forward, error) {
	f := cmdline.Forward{Proto: "tcp", HostAddr: "127.0.0.1"}
	spec, proto, ok := strings.Cut(s, "/")
	if ok {
		if proto != "tcp" && proto != "udp" {
			return f, fmt.Errorf("--publish %s: protocol %q is not tcp or udp", s, proto)
		}
		f.Proto = proto
	}
	parts := strings.Split(spec, ":")
	if len(parts) == 3 {
		if net.ParseIP(parts[0]) == nil {
			return f, fmt.Errorf("--publish %s: %q is not an IP address", s, parts[0])
		}
		f.HostAddr, parts = parts[0], parts[1:]
	}
	if len(parts) != 2 {
		return f, fmt.Errorf("--publish %s: want [ADDR:]HOSTPORT:GUESTPORT[/udp]", s)
	}
	var err error
	if f.HostPort, err = port(parts[0]); err == nil {
		f.GuestPort, err = port(parts[1])
	}
	if err != nil {
		return f, fmt.Errorf("--publish %s: %w", s, err)
	}
	return f, nil
}

func port(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("%q is not a port (1-65535)", s)
	}
	return n, nil
}
