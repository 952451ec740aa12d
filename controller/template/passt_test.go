package template

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// A passt-only VMI's launcher Pod has no NET_ADMIN, NET_RAW or
// NET_BIND_SERVICE and no /dev/net/tun; a masquerade one keeps them.
func TestPasstOnlyPodDropsNetworkPrivileges(t *testing.T) {
	for _, tc := range []struct {
		name    string
		binding func(i *v1.Interface)
		wantNet bool
	}{
		{"masquerade", func(i *v1.Interface) { i.Masquerade = &v1.InterfaceMasquerade{} }, true},
		{"passtBinding", func(i *v1.Interface) { i.PasstBinding = &v1.InterfacePasstBinding{} }, false},
		{"binding passt", func(i *v1.Interface) { i.Binding = &v1.PluginBinding{Name: "passt"} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod, err := NewService(Options{LauncherImage: "l"}).Render(Input{VMI: vmi("256Mi", func(x *v1.VirtualMachineInstance) {
				i := v1.Interface{Name: "default"}
				tc.binding(&i)
				x.Spec.Domain.Devices.Interfaces = []v1.Interface{i}
				x.Spec.Networks = []v1.Network{{Name: "default", Pod: &v1.PodNetwork{}}}
			})})
			if err != nil {
				t.Fatal(err)
			}
			c := pod.Spec.Containers[0]
			caps := c.SecurityContext.Capabilities.Add
			for _, n := range launcherpod.NetworkCapabilities {
				if slices.Contains(caps, n) != tc.wantNet {
					t.Errorf("capability %s added: %v, want %v (%v)", n, !tc.wantNet, tc.wantNet, caps)
				}
			}
			if slices.Contains(caps, corev1.Capability("KILL")) == false || slices.Contains(caps, corev1.Capability("SYS_ADMIN")) == false {
				t.Errorf("capabilities %v: the launcher's others are gone", caps)
			}
			if _, tun := c.Resources.Limits[launcherpod.ResourceTun]; tun != tc.wantNet {
				t.Errorf("tun device requested: %v, want %v", tun, tc.wantNet)
			}
			// passt's sandbox needs pivot_root: kemu's Localhost profile.
			sp := c.SecurityContext.SeccompProfile
			if passt := !tc.wantNet; passt {
				if sp == nil || sp.Type != corev1.SeccompProfileTypeLocalhost || sp.LocalhostProfile == nil || *sp.LocalhostProfile != launcherpod.PasstSeccompProfile {
					t.Errorf("seccomp %+v, want Localhost %s", sp, launcherpod.PasstSeccompProfile)
				}
			} else if sp == nil || sp.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("seccomp %+v, want RuntimeDefault", sp)
			}
		})
	}
}
