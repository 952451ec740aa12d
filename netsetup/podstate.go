package netsetup

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// podState is the pod interface as it was before the bridge binding took
// its address, routes and MAC. It is kept as the bridge's alias
// (IFLA_IFALIAS), so a restarted launcher finds it in the namespace itself
// and teardown can put everything back.
type podState struct {
	MAC    string       `json:"mac"`
	Addrs  []string     `json:"a"`           // IPv4 prefixes, e.g. 10.244.1.5/24; none: layer 2 only
	Routes []stateRoute `json:"r,omitempty"` // IPv4 routes via the pod interface
}

type stateRoute struct {
	Dst string `json:"d"`           // prefix
	GW  string `json:"g,omitempty"` // "" = on-link
}

const (
	aliasPrefix = "kemu-pod:"
	maxAlias    = 255 // IFALIASZ - 1
)

func (s *podState) encode() (string, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return "", err
	}
	a := aliasPrefix + string(b)
	if len(a) > maxAlias {
		return "", fmt.Errorf("the pod interface's addresses and routes take %d bytes, more than the %d a link alias holds", len(a), maxAlias)
	}
	return a, nil
}

// decodePodState parses a bridge alias; ok is false for an alias that is
// not kemu's.
func decodePodState(alias string) (s *podState, ok bool, err error) {
	rest, found := strings.CutPrefix(alias, aliasPrefix)
	if !found {
		return nil, false, nil
	}
	s = &podState{}
	if err := json.Unmarshal([]byte(rest), s); err != nil {
		return nil, true, fmt.Errorf("bridge alias %q: %w", alias, err)
	}
	if _, err := net.ParseMAC(s.MAC); err != nil {
		return nil, true, fmt.Errorf("bridge alias %q: %w", alias, err)
	}
	for _, a := range s.Addrs {
		if _, err := netip.ParsePrefix(a); err != nil {
			return nil, true, fmt.Errorf("bridge alias %q: %w", alias, err)
		}
	}
	for _, r := range s.Routes {
		if _, err := netip.ParsePrefix(r.Dst); err != nil {
			return nil, true, fmt.Errorf("bridge alias %q: %w", alias, err)
		}
		if r.GW != "" {
			if _, err := netip.ParseAddr(r.GW); err != nil {
				return nil, true, fmt.Errorf("bridge alias %q: %w", alias, err)
			}
		}
	}
	return s, true, nil
}

// lease turns the pod's addressing into the guest's DHCP lease: its first
// address, the default route's gateway as router, every other route as a
// classless static route (plus an on-link route to a router outside the
// subnet, as with Calico's 169.254.1.1 on a /32).
func (s *podState) lease() (ip netip.Prefix, router netip.Addr, routes []Route) {
	ip = netip.MustParsePrefix(s.Addrs[0])
	onLinkGW := false
	for _, r := range s.Routes {
		dst := netip.MustParsePrefix(r.Dst)
		var gw netip.Addr
		if r.GW != "" {
			gw = netip.MustParseAddr(r.GW)
		}
		if dst.Bits() == 0 {
			if !router.IsValid() && gw.IsValid() {
				router = gw
			}
			continue
		}
		routes = append(routes, Route{Dst: dst, Gateway: gw})
	}
	if router.IsValid() && !ip.Masked().Contains(router) {
		for _, r := range routes {
			if !r.Gateway.IsValid() && r.Dst.Contains(router) {
				onLinkGW = true
			}
		}
		if !onLinkGW {
			routes = append([]Route{{Dst: netip.PrefixFrom(router, 32)}}, routes...)
		}
	}
	return ip, router, routes
}
