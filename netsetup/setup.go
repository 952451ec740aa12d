package netsetup

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"
)

// InfoSourceDomain is the status.interfaces[].infoSource of what netsetup
// reports (KubeVirt's "domain": known from the VM's configuration).
const InfoSourceDomain = "domain"

// Result is what Setup did, for QEMU and for VMI status.interfaces.
type Result struct {
	Interfaces []InterfaceResult

	plan    *Plan
	ns      netns.NsHandle
	servers []*dhcpServer
	once    sync.Once
	closed  bool // Close was called; Result is not for concurrent use
	// nsMu guards ns against NICStats, the one method that may run
	// concurrently with Close; nsClosed: ns is closed.
	nsMu     sync.Mutex
	nsClosed bool
}

// InterfaceResult is one interface after Setup.
type InterfaceResult struct {
	Name       string   // the VMI interface name
	MAC        string   // the guest's MAC
	IPs        []string // where the cluster reaches the VM: the pod IPs
	GuestIP    string   // the address the guest leases (prefix form), e.g. 10.0.2.2/24
	InfoSource string   // InfoSourceDomain
	MTU        int      // the pod interface's, also the tap's and the guest's
	Tap        string   // tap link name
	Model      string
	// TapFDs are the tap's queues (len > 1: multiqueue), for QEMU's
	// -netdev tap,fds=. Result.Close closes them: hand them to QEMU first.
	TapFDs []*os.File
	// Passt: the passt binding; the launcher runs passt with it (no taps).
	Passt *PasstConfig
}

// Setup applies the plan in its network namespace: links, addresses,
// nftables, and a DHCP server per interface. ctx bounds Setup and the DHCP
// servers' life (they also stop on Close or Teardown). Running it again
// after a launcher restart finds and reuses what exists. Problems with the
// namespace as found (no pod interface, an overlapping vmNetworkCIDR) are
// reported with the VMI field at fault before anything is created; a
// failure later removes whatever was created.
func Setup(ctx context.Context, p *Plan) (*Result, error) {
	start := time.Now()
	ns, err := openNetNS(p.NetNSPath)
	if err != nil {
		return nil, err
	}
	h, err := netlinkHandle(ns)
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("netlink in the pod network namespace: %w", err)
	}
	defer h.Close()

	// Look first, create nothing until every interface checks out.
	pods := make([]*podLink, len(p.Interfaces))
	var errs field.ErrorList
	for i := range p.Interfaces {
		pl, ferrs, err := probe(h, &p.Interfaces[i])
		if err != nil {
			ns.Close()
			return nil, err
		}
		errs = append(errs, ferrs...)
		pods[i] = pl
	}
	if len(errs) > 0 {
		ns.Close()
		return nil, fmt.Errorf("netsetup for VMI %s: %w", p.VMI, errs.ToAggregate())
	}
	dns, err := readResolvConf(p.ResolvConf)
	if err != nil {
		ns.Close()
		return nil, err
	}

	r := &Result{plan: p, ns: ns}
	for i := range p.Interfaces {
		pi := &p.Interfaces[i]
		if err := ctx.Err(); err != nil {
			return nil, r.fail(ctx, fmt.Errorf("netsetup: %w", err))
		}
		var ir InterfaceResult
		var lease *Lease
		switch pi.Binding {
		case BindingMasquerade:
			ir, lease, err = setupMasquerade(ns, h, p, pi, pods[i])
		case BindingBridge:
			ir, lease, err = setupBridge(ns, h, p, pi, pods[i])
		case BindingPasst:
			ir = passtResult(pi, pods[i])
		default:
			err = fmt.Errorf("binding %q", pi.Binding)
		}
		if err != nil {
			return nil, r.fail(ctx, fmt.Errorf("interface %s (%s): %w", pi.Name, pi.Binding, err))
		}
		r.Interfaces = append(r.Interfaces, ir)
		if pi.Binding == BindingPasst {
			klog.InfoS("Interface ready", "vmi", p.VMI, "interface", pi.Name, "binding", pi.Binding, "mac", ir.MAC, "podIPs", ir.IPs)
			continue // passt is the guest's DHCP server
		}
		if lease != nil { // nil: layer 2 only (a secondary network without an address)
			lease.DNS, lease.Hostname, lease.Time = dns, pi.Hostname, p.LeaseTime
			lease.DNS.Search = withSubdomain(dns.Search, pi.Subdomain)
			srv, err := startDHCP(ctx, ns, pi.Bridge, lease)
			if err != nil {
				return nil, r.fail(ctx, fmt.Errorf("interface %s: %w", pi.Name, err))
			}
			r.servers = append(r.servers, srv)
		}
		klog.InfoS("Interface ready", "vmi", p.VMI, "interface", pi.Name, "binding", pi.Binding,
			"tap", pi.Tap, "queues", len(ir.TapFDs), "mac", ir.MAC, "guestIP", ir.GuestIP, "mtu", ir.MTU)
	}
	klog.InfoS("Pod network set up", "vmi", p.VMI, "interfaces", len(r.Interfaces), "duration", time.Since(start))
	return r, nil
}

// fail undoes a Setup that failed half-way.
func (r *Result) fail(ctx context.Context, err error) error {
	if terr := r.Teardown(context.WithoutCancel(ctx)); terr != nil {
		return errors.Join(err, fmt.Errorf("undoing: %w", terr))
	}
	return err
}

// Close stops the DHCP servers and closes the tap fds this process holds,
// leaving the links and rules in place (for a launcher that exits but whose
// successor will Setup again). It is safe to call more than once.
func (r *Result) Close() error {
	r.once.Do(func() {
		r.stopServers()
		for i := range r.Interfaces {
			closeFiles(r.Interfaces[i].TapFDs)
		}
		r.nsMu.Lock()
		r.ns.Close()
		r.nsClosed = true
		r.nsMu.Unlock()
		r.closed = true
	})
	return nil
}

func (r *Result) stopServers() {
	for _, s := range r.servers {
		s.stop()
	}
}

// Teardown stops the DHCP servers and removes everything Setup created,
// then closes the result.
func (r *Result) Teardown(ctx context.Context) error {
	var err error
	if r.closed {
		err = Teardown(ctx, r.plan)
	} else {
		r.stopServers()
		err = teardown(ctx, r.ns, r.plan)
	}
	r.Close()
	return err
}

// Teardown removes everything a Setup of this plan created, from the names
// alone: for a launcher that restarted and holds no Result. Missing objects
// are not an error.
func Teardown(ctx context.Context, p *Plan) error {
	ns, err := openNetNS(p.NetNSPath)
	if err != nil {
		return err
	}
	defer ns.Close()
	return teardown(ctx, ns, p)
}

func teardown(ctx context.Context, ns netns.NsHandle, p *Plan) error {
	start := time.Now()
	h, err := netlinkHandle(ns)
	if err != nil {
		return fmt.Errorf("netlink in the pod network namespace: %w", err)
	}
	defer h.Close()
	var errs []error
	for i := len(p.Interfaces) - 1; i >= 0; i-- {
		if err := ctx.Err(); err != nil {
			return err
		}
		pi := &p.Interfaces[i]
		var err error
		switch pi.Binding {
		case BindingMasquerade:
			err = teardownMasquerade(ns, h, pi)
		case BindingBridge:
			err = teardownBridge(h, pi)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("interface %s: %w", pi.Name, err))
		}
	}
	klog.InfoS("Pod network torn down", "vmi", p.VMI, "duration", time.Since(start), "errors", len(errs))
	return errors.Join(errs...)
}

// podLink is the pod interface as probe found it.
type podLink struct {
	link  netlink.Link
	addrs []netip.Prefix // IPv4
	state *podState      // bridge binding: what the guest takes over
}

// probe checks the namespace for one interface and gathers what Setup
// needs, creating nothing.
func probe(h *netlink.Handle, pi *Interface) (*podLink, field.ErrorList, error) {
	podPath := pi.sourcePath()
	l, err := linkByName(h, pi.PodInterface)
	if err != nil {
		return nil, nil, err
	}
	if l == nil {
		return nil, field.ErrorList{field.Invalid(podPath, pi.PodInterface,
			fmt.Sprintf("the pod interface %s is not in the pod network namespace", pi.PodInterface))}, nil
	}
	pl := &podLink{link: l}
	addrs, err := ipv4Addrs(h, l)
	if err != nil {
		return nil, nil, err
	}
	for _, a := range addrs {
		if pfx, ok := prefixOf(a.IPNet); ok {
			pl.addrs = append(pl.addrs, pfx)
		}
	}
	if m := l.Attrs().MasterIndex; m != 0 {
		master, err := h.LinkByIndex(m)
		if err != nil || master.Attrs().Name != pi.Bridge {
			return nil, field.ErrorList{field.Invalid(podPath, pi.PodInterface,
				fmt.Sprintf("the pod interface %s is enslaved to another device", pi.PodInterface))}, nil
		}
	}
	switch pi.Binding {
	case BindingMasquerade:
		return probeMasquerade(h, pi, pl)
	case BindingBridge:
		return probeBridge(h, pi, pl)
	case BindingPasst:
		return probePasst(pi, pl)
	}
	return nil, field.ErrorList{field.NotSupported(pi.IfacePath, string(pi.Binding), []string{"masquerade", "bridge"})}, nil
}
