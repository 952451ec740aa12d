//go:build cluster

package vmi

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// TestNamesThatAreNoHostnames: VMIs whose names are valid object names but
// no host names or label values (dots; more than 63 characters; the longest
// object name, 253) get their launcher Pods from the real API server — which
// refuses a Pod whose spec.hostname is no DNS-1123 label or whose label
// value is too long — with a derived host name and vmi-name label.
func TestNamesThatAreNoHostnames(t *testing.T) {
	ns := newNamespace(t, "names")
	startController(t, ns, nil)
	names := []string{
		"web.example.com",
		strings.Repeat("a", 62) + "." + strings.Repeat("b", 50),
		strings.Repeat("c", 120),
		strings.Repeat(strings.Repeat("d", 62)+".", 4) + "d", // 253 characters
	}
	created := map[string]*v1.VirtualMachineInstance{}
	for _, name := range names {
		created[name] = createVMI(t, ns, newVMI(name))
	}
	for _, name := range names {
		vmi := waitVMI(t, ns, name, "a launcher Pod", func(v *v1.VirtualMachineInstance) bool {
			return v.Status.Phase == v1.Scheduling && v.Status.LauncherPod != ""
		})
		pod := podOf(t, vmi)
		uid := created[name].UID
		if pod.Name != launcherpod.PodName(created[name]) || len(pod.Name) > launcherpod.MaxPodNameLength {
			t.Errorf("VMI %s: Pod %q (%d characters), want %q", name, pod.Name, len(pod.Name), launcherpod.PodName(created[name]))
		}
		if pod.Spec.Hostname != v1.DeriveHostname(name) || len(utilvalidation.IsDNS1123Label(pod.Spec.Hostname)) > 0 {
			t.Errorf("VMI %s: Pod hostname %q", name, pod.Spec.Hostname)
		}
		if got := pod.Labels[launcherpod.VMINameLabel]; got != launcherpod.VMINameLabelValue(name) || len(got) > utilvalidation.LabelValueMaxLength {
			t.Errorf("VMI %s: label %s=%q", name, launcherpod.VMINameLabel, got)
		}
		if pod.Labels[launcherpod.CreatedByLabel] != string(uid) {
			t.Errorf("VMI %s: label %s=%q, want its UID %s", name, launcherpod.CreatedByLabel, pod.Labels[launcherpod.CreatedByLabel], uid)
		}
		if ref := metav1.GetControllerOf(pod); ref == nil || ref.UID != uid || ref.Name != name {
			t.Errorf("VMI %s: Pod owner %+v", name, ref)
		}
		t.Logf("VMI %s (%d characters): Pod %s, hostname %s, %s=%s", name[:min(len(name), 30)], len(name),
			pod.Name, pod.Spec.Hostname, launcherpod.VMINameLabel, pod.Labels[launcherpod.VMINameLabel])
	}
	if pods := launcherPods(t, ns); len(pods) != len(names) {
		t.Errorf("%d launcher Pods for %d VMIs", len(pods), len(names))
	}
}
