package netsetup

import (
	"reflect"
	"strings"
	"testing"
)

func TestWithSubdomain(t *testing.T) {
	k8s := []string{"ns.svc.cluster.local", "svc.cluster.local", "cluster.local"}
	for _, tc := range []struct {
		name      string
		search    []string
		subdomain string
		want      []string
	}{
		{"no subdomain", k8s, "", k8s},
		{"subdomain first", k8s, "web", append([]string{"web.ns.svc.cluster.local"}, k8s...)},
		{"already there", []string{"web.ns.svc.cluster.local", "cluster.local"}, "web", []string{"web.ns.svc.cluster.local", "cluster.local"}},
		{"no service domain", []string{"example.com"}, "web", []string{"example.com"}},
		{"no search", nil, "web", nil},
		{"too long", []string{strings.Repeat("a", 245) + ".svc.x"}, "web", []string{strings.Repeat("a", 245) + ".svc.x"}},
	} {
		if got := withSubdomain(tc.search, tc.subdomain); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: withSubdomain(%q, %q) = %q, want %q", tc.name, tc.search, tc.subdomain, got, tc.want)
		}
	}
}
