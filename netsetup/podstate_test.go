package netsetup

import (
	"strings"
	"testing"
)

func TestPodStateAlias(t *testing.T) {
	st := &podState{MAC: "0a:58:0a:f4:01:05", Addrs: []string{"10.244.1.5/24"},
		Routes: []stateRoute{{Dst: "0.0.0.0/0", GW: "10.244.1.1"}, {Dst: "169.254.1.1/32"}}}
	a, err := st.encode()
	if err != nil {
		t.Fatal(err)
	}
	got, ok, err := decodePodState(a)
	if err != nil || !ok || got.MAC != st.MAC || len(got.Routes) != 2 || got.Routes[1].GW != "" {
		t.Fatalf("%q → %+v %v %v", a, got, ok, err)
	}
	if _, ok, err := decodePodState("someone else's alias"); ok || err != nil {
		t.Errorf("foreign alias: %v %v", ok, err)
	}
	for _, bad := range []string{aliasPrefix + "{", aliasPrefix + `{"mac":"x","a":["10.0.0.1/8"]}`,
		aliasPrefix + `{"mac":"02:00:00:00:00:01","a":["10.0.0.1/8"],"r":[{"d":"x"}]}`} {
		if _, ok, err := decodePodState(bad); !ok || err == nil {
			t.Errorf("%q: %v %v", bad, ok, err)
		}
	}
	// A secondary network's pod interface without an address: layer 2 only.
	if l2, ok, err := decodePodState(aliasPrefix + `{"mac":"02:00:00:00:00:01","a":null}`); err != nil || !ok || !l2.l2Only() {
		t.Errorf("layer 2 alias: %+v %v %v", l2, ok, err)
	}
	for range 20 {
		st.Routes = append(st.Routes, stateRoute{Dst: "10.100.100.0/24", GW: "10.244.1.1"})
	}
	if _, err := st.encode(); err == nil || !strings.Contains(err.Error(), "alias") {
		t.Errorf("too long: %v", err)
	}
}

func TestPodStateLease(t *testing.T) {
	for _, tc := range []struct {
		name   string
		st     podState
		ip     string
		router string
		routes string
	}{
		{"plain subnet", podState{Addrs: []string{"10.244.1.5/24"}, Routes: []stateRoute{{Dst: "0.0.0.0/0", GW: "10.244.1.1"}}},
			"10.244.1.5/24", "10.244.1.1", "[]"},
		{"calico /32 with on-link gateway route", podState{Addrs: []string{"10.244.1.5/32"},
			Routes: []stateRoute{{Dst: "169.254.1.1/32"}, {Dst: "0.0.0.0/0", GW: "169.254.1.1"}}},
			"10.244.1.5/32", "169.254.1.1", "[{169.254.1.1/32 invalid IP}]"},
		{"/32 without the gateway route gets one", podState{Addrs: []string{"10.244.1.5/32"},
			Routes: []stateRoute{{Dst: "0.0.0.0/0", GW: "169.254.1.1"}}},
			"10.244.1.5/32", "169.254.1.1", "[{169.254.1.1/32 invalid IP}]"},
		{"no default route", podState{Addrs: []string{"10.244.1.5/24"}}, "10.244.1.5/24", "invalid IP", "[]"},
	} {
		ip, router, routes := tc.st.lease()
		if ip.String() != tc.ip || router.String() != tc.router || fmtRoutes(routes) != tc.routes {
			t.Errorf("%s: %s %s %s", tc.name, ip, router, fmtRoutes(routes))
		}
	}
}

func fmtRoutes(rs []Route) string {
	var s []string
	for _, r := range rs {
		s = append(s, "{"+r.Dst.String()+" "+r.Gateway.String()+"}")
	}
	return "[" + strings.Join(s, " ") + "]"
}
