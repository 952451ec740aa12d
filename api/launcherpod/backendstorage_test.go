package launcherpod

import (
	"strings"
	"testing"

	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
)

func TestBackendStoragePVCName(t *testing.T) {
	long := strings.Repeat("a", 230) + "." + strings.Repeat("b", 22)
	for _, tc := range []struct{ vm, want string }{
		{"vm", "persistent-state-for-vm"},
		{strings.Repeat("x", 232), "persistent-state-for-" + strings.Repeat("x", 232)},
		{long, "persistent-state-for-" + strings.Repeat("a", 221) + "-"},
	} {
		got := BackendStoragePVCName(tc.vm)
		if !strings.HasPrefix(got, tc.want) || len(got) > 253 {
			t.Errorf("%d chars: %q (%d), want prefix %q", len(tc.vm), got, len(got), tc.want)
		}
		if errs := utilvalidation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Errorf("%q: %v", got, errs)
		}
		for k, v := range BackendStorageLabels(tc.vm) {
			if errs := append(utilvalidation.IsQualifiedName(k), utilvalidation.IsValidLabelValue(v)...); len(errs) > 0 {
				t.Errorf("label %s=%s: %v", k, v, errs)
			}
		}
	}
	if a, b := BackendStoragePVCName(long), BackendStoragePVCName(long+"c"); a == b {
		t.Errorf("two long names share %q", a)
	}
}
