package netsetup

import (
	"net/netip"
	"testing"
)

func TestNATRules(t *testing.T) {
	base := natTable{Name: "kemu-eth0", PodIface: "eth0", GuestIP: netip.MustParseAddr("10.0.2.2"),
		VMNetwork: netip.MustParsePrefix("10.0.2.0/24"), PodIPs: []netip.Addr{netip.MustParseAddr("10.244.1.5")}}
	for _, tc := range []struct {
		name               string
		ports              []Port
		podIPs             int
		pre, out, post     int
		preLen, postLenMin int
	}{
		{name: "all ports: tcp and udp", podIPs: 1, pre: 2, out: 2, post: 1},
		{name: "listed ports", ports: []Port{{"tcp", 80}, {"udp", 53}, {"tcp", 443}}, podIPs: 1, pre: 3, out: 3, post: 1},
		{name: "two pod IPs", ports: []Port{{"tcp", 80}}, podIPs: 2, pre: 2, out: 2, post: 1},
	} {
		tb := base
		tb.Ports = tc.ports
		if tc.podIPs == 2 {
			tb.PodIPs = append(tb.PodIPs, netip.MustParseAddr("10.244.1.6"))
		}
		r := tb.rules()
		if len(r[chainPrerouting]) != tc.pre || len(r[chainOutput]) != tc.out || len(r[chainPostrouting]) != tc.post {
			t.Errorf("%s: %d/%d/%d rules", tc.name, len(r[chainPrerouting]), len(r[chainOutput]), len(r[chainPostrouting]))
		}
		// prerouting = output + the iifname match (2 expressions).
		for i := range r[chainPrerouting] {
			if len(r[chainPrerouting][i]) != len(r[chainOutput][i])+2 {
				t.Errorf("%s: rule %d: %d vs %d expressions", tc.name, i, len(r[chainPrerouting][i]), len(r[chainOutput][i]))
			}
		}
	}
}
