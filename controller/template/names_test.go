package template

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// Names a VMI may have (every one a valid object name, a DNS-1123
// subdomain) that are no host name or label value: the launcher Pod must
// still be valid.
var vmiNames = []struct{ name, hostname string }{
	{"vm1", "vm1"},
	{"web.example.com", "web"},
	{strings.Repeat("a", 43), strings.Repeat("a", 43)}, // the longest Pod name kept whole
	{strings.Repeat("a", 44), strings.Repeat("a", 44)},
	{strings.Repeat("b", 63), strings.Repeat("b", 63)},
	{strings.Repeat("c", 64), strings.Repeat("c", 63)},
	{strings.Repeat("d", 37) + "-" + strings.Repeat("e", 50), strings.Repeat("d", 37) + "-" + strings.Repeat("e", 25)}, // Pod name cut after '-'
	{strings.Repeat("d", 37) + "." + strings.Repeat("e", 50), strings.Repeat("d", 37)},                                 // after '.'

	{strings.Repeat("f", 62) + "-g" + strings.Repeat("h", 50), strings.Repeat("f", 62)},
	{strings.Repeat(strings.Repeat("i", 62)+".", 4) + "j", strings.Repeat("i", 62)}, // 253 characters
	{strings.Repeat("k.", 126) + "k", "k"},
}

func TestLauncherPodNames(t *testing.T) {
	svc := NewService(Options{LauncherImage: "l"})
	for _, tc := range vmiNames {
		t.Run(tc.name[:min(len(tc.name), 20)], func(t *testing.T) {
			if errs := utilvalidation.IsDNS1123Subdomain(tc.name); len(errs) > 0 {
				t.Fatalf("test name %q is no object name: %v", tc.name, errs)
			}
			x := vmi("256Mi", func(x *v1.VirtualMachineInstance) { x.Name = tc.name })
			pod, err := svc.Render(Input{VMI: x})
			if err != nil {
				t.Fatal(err)
			}
			if errs := utilvalidation.IsDNS1123Subdomain(pod.Name); len(errs) > 0 || len(pod.Name) > launcherpod.MaxPodNameLength {
				t.Errorf("Pod name %q (%d): %v", pod.Name, len(pod.Name), errs)
			}
			if !strings.HasPrefix(pod.Name, launcherpod.PodNamePrefix) {
				t.Errorf("Pod name %q", pod.Name)
			}
			if errs := utilvalidation.IsDNS1123Label(pod.Spec.Hostname); len(errs) > 0 || pod.Spec.Hostname != tc.hostname {
				t.Errorf("hostname %q, want %q: %v", pod.Spec.Hostname, tc.hostname, errs)
			}
			for k, v := range pod.Labels {
				if errs := utilvalidation.IsValidLabelValue(v); len(errs) > 0 {
					t.Errorf("label %s=%q: %v", k, v, errs)
				}
			}
			l := pod.Labels[launcherpod.VMINameLabel]
			if len(tc.name) <= utilvalidation.LabelValueMaxLength && l != tc.name {
				t.Errorf("label %s=%q, want the name itself", launcherpod.VMINameLabel, l)
			}
			if len(tc.name) > utilvalidation.LabelValueMaxLength && l == launcherpod.VMINameLabelValue(tc.name+"x") {
				t.Errorf("label %s=%q for two names", launcherpod.VMINameLabel, l)
			}
			if len(tc.name) <= 43 && pod.Name != launcherpod.PodNamePrefix+tc.name+"-"+launcherpod.PodName(x)[len(pod.Name)-5:] {
				t.Errorf("Pod name %q: a short VMI name is kept whole", pod.Name)
			}
		})
	}
}

// Two VMIs whose long names share their first 38 characters, or the same
// VMI recreated, get Pods of different names; the same VMI always the same.
func TestPodNameDistinct(t *testing.T) {
	long := strings.Repeat("x", 60)
	seen := map[string]string{}
	for _, name := range []string{long + "a", long + "b", "vm1", strings.Repeat("x", 38)} {
		for _, uid := range []types.UID{"uid-1", "uid-2"} {
			x := vmi("256Mi", func(x *v1.VirtualMachineInstance) { x.Name, x.UID = name, uid })
			n := launcherpod.PodName(x)
			if launcherpod.PodName(x.DeepCopy()) != n {
				t.Errorf("launcherpod.PodName(%s, %s) is not stable", name, uid)
			}
			if other, dup := seen[n]; dup {
				t.Errorf("Pod name %s for %s/%s and %s", n, name, uid, other)
			}
			seen[n] = name + "/" + string(uid)
		}
	}
}
