package netsetup

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

var (
	guestMAC = net.HardwareAddr{0x02, 0x6b, 0x65, 0x6d, 0x75, 0x01}
	testDNS  = DNSConfig{Servers: []netip.Addr{netip.MustParseAddr("10.96.0.10")}, Search: []string{"ns1.svc.cluster.local", "svc.cluster.local"}}
)

func masqLease() *Lease {
	return &Lease{MAC: guestMAC, IP: netip.MustParsePrefix("10.0.2.2/24"), Router: netip.MustParseAddr("10.0.2.1"),
		ServerID: netip.MustParseAddr("10.0.2.1"), DNS: testDNS, Hostname: "vm1", MTU: 1450}
}

func discover(t *testing.T, mac net.HardwareAddr) *dhcpv4.DHCPv4 {
	t.Helper()
	d, err := dhcpv4.NewDiscovery(mac)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func request(t *testing.T, offer *dhcpv4.DHCPv4, ip string) *dhcpv4.DHCPv4 {
	t.Helper()
	r, err := dhcpv4.NewRequestFromOffer(offer)
	if err != nil {
		t.Fatal(err)
	}
	r.UpdateOption(dhcpv4.OptRequestedIPAddress(net.ParseIP(ip)))
	return r
}

func TestLeaseOffer(t *testing.T) {
	l := masqLease()
	offer, err := l.Reply(discover(t, guestMAC))
	if err != nil || offer == nil {
		t.Fatalf("offer %v, %v", offer, err)
	}
	if offer.MessageType() != dhcpv4.MessageTypeOffer || !offer.YourIPAddr.Equal(net.ParseIP("10.0.2.2")) {
		t.Errorf("offer: %s", offer.Summary())
	}
	if m := offer.SubnetMask(); m.String() != "ffffff00" {
		t.Errorf("mask %s", m)
	}
	if r := offer.Router(); len(r) != 1 || !r[0].Equal(net.ParseIP("10.0.2.1")) {
		t.Errorf("router %v", r)
	}
	if s := offer.ServerIdentifier(); !s.Equal(net.ParseIP("10.0.2.1")) {
		t.Errorf("server id %v", s)
	}
	if d := offer.DNS(); len(d) != 1 || !d[0].Equal(net.ParseIP("10.96.0.10")) {
		t.Errorf("dns %v", d)
	}
	if s := offer.DomainSearch(); s == nil || !slices.Equal(s.Labels, testDNS.Search) {
		t.Errorf("search %v", s)
	}
	if offer.DomainName() != "ns1.svc.cluster.local" || offer.HostName() != "vm1" {
		t.Errorf("domain %q host %q", offer.DomainName(), offer.HostName())
	}
	if mtu := offer.GetOneOption(dhcpv4.OptionInterfaceMTU); len(mtu) != 2 || int(mtu[0])<<8|int(mtu[1]) != 1450 {
		t.Errorf("mtu %v", mtu)
	}
	if lt := offer.IPAddressLeaseTime(0); lt != InfiniteLease {
		t.Errorf("lease %v", lt)
	}
	if rs := offer.ClasslessStaticRoute(); rs != nil {
		t.Errorf("routes %v without routes", rs)
	}

	ack, err := l.Reply(request(t, offer, "10.0.2.2"))
	if err != nil || ack == nil || ack.MessageType() != dhcpv4.MessageTypeAck || !ack.YourIPAddr.Equal(net.ParseIP("10.0.2.2")) {
		t.Fatalf("ack %v, %v", ack, err)
	}
	nak, err := l.Reply(request(t, offer, "10.0.2.9"))
	if err != nil || nak == nil || nak.MessageType() != dhcpv4.MessageTypeNak {
		t.Fatalf("nak %v, %v", nak, err)
	}
	l.Time = time.Hour
	ack, _ = l.Reply(request(t, offer, "10.0.2.2"))
	if lt := ack.IPAddressLeaseTime(0); lt != time.Hour {
		t.Errorf("lease %v", lt)
	}
}

func TestLeaseIgnores(t *testing.T) {
	l := masqLease()
	other := net.HardwareAddr{0x02, 0, 0, 0, 0, 9}
	if r, err := l.Reply(discover(t, other)); r != nil || err != nil {
		t.Errorf("answered another MAC: %v %v", r, err)
	}
	offer, _ := l.Reply(discover(t, guestMAC))
	req := request(t, offer, "10.0.2.2")
	req.UpdateOption(dhcpv4.OptServerIdentifier(net.ParseIP("10.0.2.254")))
	if r, _ := l.Reply(req); r != nil {
		t.Errorf("answered a request for another server: %s", r.Summary())
	}
	rel, _ := dhcpv4.New(dhcpv4.WithHwAddr(guestMAC), dhcpv4.WithMessageType(dhcpv4.MessageTypeRelease))
	if r, _ := l.Reply(rel); r != nil {
		t.Errorf("answered RELEASE: %s", r.Summary())
	}
	inform, _ := dhcpv4.New(dhcpv4.WithHwAddr(guestMAC), dhcpv4.WithMessageType(dhcpv4.MessageTypeInform), dhcpv4.WithClientIP(net.ParseIP("10.0.2.2")))
	r, _ := l.Reply(inform)
	if r == nil || r.MessageType() != dhcpv4.MessageTypeAck || !r.YourIPAddr.IsUnspecified() || r.GetOneOption(dhcpv4.OptionIPAddressLeaseTime) != nil {
		t.Errorf("inform reply %v", r)
	}
}

// The bridge binding's lease carries the pod's routes (option 121) and the
// default route inside it.
func TestLeaseClasslessRoutes(t *testing.T) {
	st := &podState{MAC: "0a:58:0a:f4:01:05", Addrs: []string{"10.244.1.5/32"},
		Routes: []stateRoute{{Dst: "0.0.0.0/0", GW: "169.254.1.1"}, {Dst: "10.96.0.0/12", GW: "169.254.1.1"}}}
	ip, router, routes := st.lease()
	if ip.String() != "10.244.1.5/32" || router.String() != "169.254.1.1" {
		t.Fatalf("%s %s", ip, router)
	}
	l := &Lease{MAC: guestMAC, IP: ip, Router: router, ServerID: BridgeServerIP, Routes: routes}
	offer, _ := l.Reply(discover(t, guestMAC))
	var got []string
	for _, r := range offer.ClasslessStaticRoute() {
		got = append(got, r.String())
	}
	want := "[route to 169.254.1.1/32 via 0.0.0.0 route to 10.96.0.0/12 via 169.254.1.1 route to 0.0.0.0/0 via 169.254.1.1]"
	if s := "[" + strings.Join(got, " ") + "]"; s != want {
		t.Errorf("option 121 %s, want %s", s, want)
	}
}
