package netsetup

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/rfc1035label"
)

// InfiniteLease is the DHCP lease time 0xffffffff (RFC 2131: infinity).
const InfiniteLease = time.Duration(0xffffffff) * time.Second

// Route is a route the guest learns by DHCP (option 121). A zero Gateway
// means on-link.
type Route struct {
	Dst     netip.Prefix
	Gateway netip.Addr
}

// Lease is the one address the DHCP server of an interface hands out, and
// the options that come with it.
type Lease struct {
	MAC      net.HardwareAddr // the only client answered
	IP       netip.Prefix     // the guest's address and prefix length
	Router   netip.Addr       // may be invalid (no default route)
	ServerID netip.Addr       // the server's address on the bridge
	DNS      DNSConfig
	Hostname string
	MTU      int
	Routes   []Route       // besides the default route via Router; sent as option 121
	Time     time.Duration // 0 = infinite
}

// Reply answers a request from the guest: OFFER to DISCOVER, ACK or NAK to
// REQUEST, ACK to INFORM. It returns nil for anything to ignore: another
// client's MAC, RELEASE, DECLINE, a REQUEST for another server.
func (l *Lease) Reply(req *dhcpv4.DHCPv4) (*dhcpv4.DHCPv4, error) {
	if req.OpCode != dhcpv4.OpcodeBootRequest || len(req.ClientHWAddr) != 6 ||
		!equalMAC(req.ClientHWAddr, l.MAC) {
		return nil, nil
	}
	var typ dhcpv4.MessageType
	yours := l.IP.Addr()
	switch req.MessageType() {
	case dhcpv4.MessageTypeDiscover:
		typ = dhcpv4.MessageTypeOffer
	case dhcpv4.MessageTypeRequest:
		if sid := req.ServerIdentifier(); sid != nil && !sid.Equal(net.IP(l.ServerID.AsSlice())) {
			return nil, nil // the client chose another server
		}
		want := req.RequestedIPAddress()
		if want == nil || want.IsUnspecified() {
			want = req.ClientIPAddr // renewing or rebinding
		}
		if !want.Equal(net.IP(yours.AsSlice())) {
			return dhcpv4.NewReplyFromRequest(req,
				dhcpv4.WithMessageType(dhcpv4.MessageTypeNak),
				dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IP(l.ServerID.AsSlice()))),
				dhcpv4.WithOption(dhcpv4.OptMessage(fmt.Sprintf("this client's address is %s", yours))))
		}
		typ = dhcpv4.MessageTypeAck
	case dhcpv4.MessageTypeInform:
		typ = dhcpv4.MessageTypeAck
		yours = netip.IPv4Unspecified()
	default:
		return nil, nil
	}
	mods := []dhcpv4.Modifier{
		dhcpv4.WithMessageType(typ),
		dhcpv4.WithYourIP(net.IP(yours.AsSlice())),
		dhcpv4.WithServerIP(net.IP(l.ServerID.AsSlice())),
	}
	for _, o := range l.Options(typ == dhcpv4.MessageTypeAck && req.MessageType() == dhcpv4.MessageTypeInform) {
		mods = append(mods, dhcpv4.WithOption(o))
	}
	return dhcpv4.NewReplyFromRequest(req, mods...)
}

// Options are the DHCP options of an offer or ack; inform leaves out the
// lease time (RFC 2131 4.3.5).
func (l *Lease) Options(inform bool) []dhcpv4.Option {
	opts := []dhcpv4.Option{
		dhcpv4.OptServerIdentifier(net.IP(l.ServerID.AsSlice())),
		dhcpv4.OptSubnetMask(net.CIDRMask(l.IP.Bits(), 32)),
	}
	if !inform {
		d := l.Time
		if d <= 0 || d > InfiniteLease {
			d = InfiniteLease
		}
		opts = append(opts, dhcpv4.OptIPAddressLeaseTime(d))
	}
	if l.Router.IsValid() {
		opts = append(opts, dhcpv4.OptRouter(net.IP(l.Router.AsSlice())))
	}
	if len(l.DNS.Servers) > 0 {
		ips := make([]net.IP, len(l.DNS.Servers))
		for i, a := range l.DNS.Servers {
			ips[i] = net.IP(a.AsSlice())
		}
		opts = append(opts, dhcpv4.OptDNS(ips...))
	}
	if len(l.DNS.Search) > 0 {
		opts = append(opts, dhcpv4.OptDomainName(l.DNS.Search[0]))
		opts = append(opts, dhcpv4.OptDomainSearch(&rfc1035label.Labels{Labels: l.DNS.Search}))
	}
	if l.Hostname != "" {
		opts = append(opts, dhcpv4.OptHostName(l.Hostname))
	}
	if l.MTU > 0 && l.MTU <= 0xffff {
		opts = append(opts, dhcpv4.OptGeneric(dhcpv4.OptionInterfaceMTU, binary.BigEndian.AppendUint16(nil, uint16(l.MTU))))
	}
	if len(l.Routes) > 0 {
		// A client that takes option 121 ignores option 3 (RFC 3442), so
		// the default route goes into 121 as well.
		var rs []*dhcpv4.Route
		for _, r := range l.Routes {
			rs = append(rs, dhcpRoute(r))
		}
		if l.Router.IsValid() {
			rs = append(rs, dhcpRoute(Route{Dst: netip.PrefixFrom(netip.IPv4Unspecified(), 0), Gateway: l.Router}))
		}
		opts = append(opts, dhcpv4.OptClasslessStaticRoute(rs...))
	}
	return opts
}

func dhcpRoute(r Route) *dhcpv4.Route {
	gw := net.IPv4zero.To4()
	if r.Gateway.IsValid() {
		gw = net.IP(r.Gateway.AsSlice())
	}
	dst := r.Dst.Masked()
	return &dhcpv4.Route{
		Dest:   &net.IPNet{IP: net.IP(dst.Addr().AsSlice()), Mask: net.CIDRMask(dst.Bits(), 32)},
		Router: gw,
	}
}

func equalMAC(a, b net.HardwareAddr) bool {
	return len(a) == len(b) && string(a) == string(b)
}
