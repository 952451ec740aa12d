package launcherpod

import (
	"testing"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

func TestPodInterfaceName(t *testing.T) {
	for _, tc := range []struct {
		n    v1.Network
		want string
	}{
		{v1.Network{Name: "default", Pod: &v1.PodNetwork{}}, "eth0"},
		{v1.Network{Name: "main", Multus: &v1.MultusNetwork{NetworkName: "x", Default: true}}, "eth0"},
		// KubeVirt's namescheme: "pod" + sha256(name)[:11] (sha256sum).
		{v1.Network{Name: "blue", Multus: &v1.MultusNetwork{NetworkName: "x"}}, "pod16477688c0e"},
		{v1.Network{Name: "red", Multus: &v1.MultusNetwork{NetworkName: "ns/x"}}, "podb1f51a511f1"},
	} {
		if got := PodInterfaceName(tc.n); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.n.Name, got, tc.want)
		}
	}
	for _, tc := range []struct{ name, ns, n string }{{"nad", "vmins", "nad"}, {"other/nad", "other", "nad"}} {
		if ns, n := NetworkAttachment("vmins", tc.name); ns != tc.ns || n != tc.n {
			t.Errorf("%s: %s/%s", tc.name, ns, n)
		}
	}
}
