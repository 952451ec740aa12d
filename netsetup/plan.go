package netsetup

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// Defaults.
const (
	// DefaultPodInterface is the pod network's interface in the pod netns.
	DefaultPodInterface = "eth0"
	// DefaultVMNetworkCIDR is the guest network behind masquerade.
	DefaultVMNetworkCIDR = "10.0.2.0/24"
	// DefaultResolvConf is where the pod's DNS settings are read from.
	DefaultResolvConf = "/etc/resolv.conf"
	// MaxQueues is the largest tap queue count (the kernel's MAX_TAP_QUEUES).
	MaxQueues = 256
)

// Binding is how an interface reaches the pod network.
type Binding string

// Bindings.
const (
	BindingMasquerade Binding = "masquerade"
	BindingBridge     Binding = "bridge"
	BindingPasst      Binding = "passt" // passt.go: nothing wired, passt serves the guest
)

// Options are the launcher's choices, not the VMI's.
type Options struct {
	// NetNSPath is the pod network namespace (e.g. /var/run/netns/x or
	// /proc/<pid>/ns/net); "" = the launcher's own (/proc/self/ns/net).
	NetNSPath string
	// PodInterface is the pod network's interface; "" = DefaultPodInterface.
	PodInterface string
	// ResolvConf is read for the guest's DNS servers and search domains;
	// "" = DefaultResolvConf. A missing file means no DNS options.
	ResolvConf string
	// TapUID and TapGID own the taps (QEMU's uid and gid); -1 leaves the
	// owner unset (only root and CAP_NET_ADMIN may then attach).
	TapUID, TapGID int
	// Multiqueue overrides spec.domain.devices.networkInterfaceMultiqueue.
	Multiqueue *bool
	// LeaseTime of the DHCP lease; 0 = infinite.
	LeaseTime time.Duration
	// PodCIDRs, when known before Setup, let Plan reject a vmNetworkCIDR
	// that overlaps them; Setup checks the live addresses and routes anyway.
	PodCIDRs []netip.Prefix
}

// Plan is what Setup will do: validated, with every name, MAC, address and
// queue count decided. Plan never touches the system.
type Plan struct {
	VMI        string // namespace/name, for logs
	NetNSPath  string
	ResolvConf string
	TapUID     int
	TapGID     int
	LeaseTime  time.Duration
	Interfaces []Interface
}

// Interface is the plan for one VMI interface.
type Interface struct {
	Name         string // the VMI interface (= network) name
	Index        int    // in spec.domain.devices.interfaces
	Binding      Binding
	Model        string
	PodInterface string
	// Multus: the network is a Multus network (networks[j].multus);
	// Secondary: a secondary one, whose pod interface may have no IPv4
	// address (the guest then gets layer 2 only, no DHCP).
	Multus, Secondary bool
	Bridge            string // bridge link name
	Tap               string // tap link name
	Table             string // nftables table (masquerade only)
	// MAC is the guest's MAC; nil for a bridge binding without macAddress:
	// the guest then takes the pod interface's MAC at Setup.
	MAC net.HardwareAddr
	// PodMAC is the MAC the pod interface takes when the guest takes its
	// own (bridge binding).
	PodMAC   net.HardwareAddr
	Queues   int    // tap queues, 1 = single queue
	Hostname string // DHCP host name option
	// Subdomain is the VMI's spec.subdomain: its service domain goes first
	// in the lease's domain search (withSubdomain).
	Subdomain string

	// Masquerade only.
	VMNetwork netip.Prefix // the guest network, e.g. 10.0.2.0/24
	Gateway   netip.Addr   // first address: on the bridge, the guest's router
	GuestIP   netip.Addr   // second address: leased to the guest
	Ports     []Port       // forwarded ports; empty = all TCP and UDP ports

	// Field paths for errors found at Setup.
	NetworkPath *field.Path // spec.networks[j]
	IfacePath   *field.Path // spec.domain.devices.interfaces[i]
}

// Port is a forwarded port.
type Port struct {
	Protocol string // "tcp" or "udp"
	Port     uint16
}

// NewPlan validates a defaulted VMI's interfaces and networks and decides
// what Setup does. Errors carry field paths (spec.…, or options.… for opts).
func NewPlan(vmi *v1.VirtualMachineInstance, opts Options) (*Plan, field.ErrorList) {
	if vmi == nil {
		return nil, field.ErrorList{field.Required(field.NewPath("vmi"), "no VMI")}
	}
	p := &Plan{
		VMI:        vmi.Namespace + "/" + vmi.Name,
		NetNSPath:  opts.NetNSPath,
		ResolvConf: opts.ResolvConf,
		TapUID:     opts.TapUID,
		TapGID:     opts.TapGID,
		LeaseTime:  opts.LeaseTime,
	}
	if p.ResolvConf == "" {
		p.ResolvConf = DefaultResolvConf
	}
	podIface := opts.PodInterface
	if podIface == "" {
		podIface = DefaultPodInterface
	}
	var errs field.ErrorList
	if len(podIface) > maxLinkName || strings.ContainsAny(podIface, "/ \t\n") {
		errs = append(errs, field.Invalid(field.NewPath("options", "podInterface"), podIface, "not a network interface name"))
	}
	if opts.LeaseTime < 0 || opts.LeaseTime/time.Second >= 1<<32-1 {
		errs = append(errs, field.Invalid(field.NewPath("options", "leaseTime"), opts.LeaseTime.String(), "must be 0 (infinite) or less than 136 years"))
	}
	uidKey := string(vmi.UID)
	if uidKey == "" {
		uidKey = vmi.Namespace + "/" + vmi.Name
	}
	queues, qerrs := queueCount(vmi, opts)
	errs = append(errs, qerrs...)

	spec := field.NewPath("spec")
	nets := map[string]int{}
	for j, n := range vmi.Spec.Networks {
		nets[n.Name] = j
	}
	usedPod := map[string]string{}
	for i, iface := range vmi.Spec.Domain.Devices.Interfaces {
		ip := spec.Child("domain", "devices", "interfaces").Index(i)
		j, ok := nets[iface.Name]
		if !ok {
			errs = append(errs, field.NotFound(ip.Child("name"), iface.Name))
			continue
		}
		network := vmi.Spec.Networks[j]
		np := spec.Child("networks").Index(j)
		ifacePod, secondary, ferr := networkPodInterface(network, np, podIface, iface, ip)
		if ferr != nil {
			errs = append(errs, ferr)
			continue
		}
		if other, dup := usedPod[ifacePod]; dup {
			errs = append(errs, field.Invalid(ip.Child("name"), iface.Name,
				fmt.Sprintf("the pod interface %s is already attached by interface %q", ifacePod, other)))
			continue
		}
		usedPod[ifacePod] = iface.Name
		pi := Interface{
			Name:         iface.Name,
			Index:        i,
			Model:        iface.Model,
			PodInterface: ifacePod,
			Secondary:    secondary,
			Multus:       network.Multus != nil,
			Bridge:       BridgeName(ifacePod),
			Tap:          TapName(ifacePod),
			Queues:       1,
			Hostname:     v1.VMIHostname(vmi), // as the Pod's and cloud-init's
			Subdomain:    vmi.Spec.Subdomain,
			NetworkPath:  np,
			IfacePath:    ip,
		}
		if pi.Model == "" {
			pi.Model = v1.DefaultInterfaceModel
		}
		if pi.Model == "virtio" {
			pi.Queues = queues
		}
		switch {
		case iface.UsesPasst() && (iface.Masquerade != nil || iface.Bridge != nil):
			errs = append(errs, field.Invalid(ip, iface.Name, "an interface has one binding: masquerade, bridge or passtBinding"))
			continue
		case iface.UsesPasst():
			pi.Binding = BindingPasst
		case iface.Masquerade != nil && iface.Bridge != nil:
			errs = append(errs, field.Invalid(ip, iface.Name, "an interface has one binding: masquerade or bridge"))
			continue
		case iface.Masquerade != nil:
			pi.Binding = BindingMasquerade
		case iface.Bridge != nil:
			pi.Binding = BindingBridge
		default:
			errs = append(errs, field.Required(ip.Child("masquerade"), "netsetup supports the masquerade and bridge bindings"))
			continue
		}
		if m := iface.MacAddress; m != "" {
			hw, err := parseMAC(m)
			if err != nil {
				errs = append(errs, field.Invalid(ip.Child("macAddress"), m, err.Error()))
				continue
			}
			pi.MAC = hw
		} else if pi.Binding == BindingMasquerade || pi.Binding == BindingPasst {
			pi.MAC = DeriveMAC(uidKey, iface.Name)
		}
		if pi.Binding == BindingBridge {
			pi.PodMAC = DeriveMAC(uidKey, iface.Name+"/pod")
			if len(iface.Ports) > 0 {
				errs = append(errs, field.Invalid(ip.Child("ports"), len(iface.Ports), "ports are only forwarded with the masquerade binding"))
			}
		}
		if pi.Binding == BindingPasst {
			planPasst(&pi, ip, iface, &errs)
		}
		if pi.Binding == BindingMasquerade {
			pi.Table = TableName(ifacePod)
			cidrPath := np.Child("pod", "vmNetworkCIDR")
			cidr := network.Pod.VMNetworkCIDR
			if cidr == "" {
				cidr = DefaultVMNetworkCIDR
			}
			pfx, gw, guest, err := guestNetwork(cidr)
			if err != nil {
				errs = append(errs, field.Invalid(cidrPath, cidr, err.Error()))
				continue
			}
			if o, bad := overlapsAny(pfx, opts.PodCIDRs); bad {
				errs = append(errs, field.Invalid(cidrPath, cidr, fmt.Sprintf("overlaps the pod's network %s", o)))
				continue
			}
			pi.VMNetwork, pi.Gateway, pi.GuestIP = pfx, gw, guest
			ports, perrs := portList(ip.Child("ports"), iface.Ports)
			errs = append(errs, perrs...)
			pi.Ports = ports
		}
		p.Interfaces = append(p.Interfaces, pi)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return p, nil
}

// queueCount is KubeVirt's rule: with networkInterfaceMultiqueue, one queue
// per vCPU (sockets × cores × threads), at most MaxQueues.
func queueCount(vmi *v1.VirtualMachineInstance, opts Options) (int, field.ErrorList) {
	mq := false
	if f := vmi.Spec.Domain.Devices.NetworkInterfaceMultiqueue; f != nil {
		mq = *f
	}
	if opts.Multiqueue != nil {
		mq = *opts.Multiqueue
	}
	if !mq {
		return 1, nil
	}
	n := 1
	if c := vmi.Spec.Domain.CPU; c != nil {
		n = int(max(c.Sockets, 1)) * int(max(c.Cores, 1)) * int(max(c.Threads, 1))
	}
	return min(max(n, 1), MaxQueues), nil
}

// guestNetwork parses an IPv4 CIDR and returns the network, its first
// address (gateway) and its second (guest).
func guestNetwork(cidr string) (pfx netip.Prefix, gw, guest netip.Addr, err error) {
	pfx, err = netip.ParsePrefix(cidr)
	if err != nil || !pfx.Addr().Is4() {
		return pfx, gw, guest, fmt.Errorf("must be an IPv4 CIDR such as %s", DefaultVMNetworkCIDR)
	}
	if pfx.Bits() > 30 {
		return pfx, gw, guest, fmt.Errorf("prefix must be /30 or shorter: the gateway and the guest need addresses")
	}
	pfx = pfx.Masked()
	gw = pfx.Addr().Next()
	return pfx, gw, gw.Next(), nil
}

// overlapsAny returns the first of others that overlaps pfx.
func overlapsAny(pfx netip.Prefix, others []netip.Prefix) (netip.Prefix, bool) {
	for _, o := range others {
		if o.IsValid() && o.Addr().Is4() && o.Bits() > 0 && pfx.Overlaps(o) {
			return o, true
		}
	}
	return netip.Prefix{}, false
}

// portList normalises interfaces[].ports: protocol in lower case (default
// tcp), in range, no duplicates.
func portList(p *field.Path, in []v1.Port) ([]Port, field.ErrorList) {
	var errs field.ErrorList
	var out []Port
	seen := map[Port]bool{}
	for k, port := range in {
		pp := p.Index(k)
		proto := strings.ToLower(port.Protocol)
		if proto == "" {
			proto = "tcp"
		}
		if proto != "tcp" && proto != "udp" {
			errs = append(errs, field.NotSupported(pp.Child("protocol"), port.Protocol, []string{"TCP", "UDP"}))
			continue
		}
		if port.Port < 1 || port.Port > 65535 {
			errs = append(errs, field.Invalid(pp.Child("port"), port.Port, "must be between 1 and 65535"))
			continue
		}
		fp := Port{Protocol: proto, Port: uint16(port.Port)}
		if seen[fp] {
			errs = append(errs, field.Duplicate(pp, fmt.Sprintf("%s/%d", strings.ToUpper(proto), port.Port)))
			continue
		}
		seen[fp] = true
		out = append(out, fp)
	}
	return out, errs
}
