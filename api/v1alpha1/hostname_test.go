package v1alpha1

import (
	"strings"
	"testing"

	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
)

func TestDeriveHostname(t *testing.T) {
	long := strings.Repeat("a", 62) + "-b" + strings.Repeat("c", 30)
	for _, tc := range []struct{ name, want string }{
		{"vm1", "vm1"},
		{"web.example.com", "web"},
		{"a.b", "a"},
		{strings.Repeat("x", 63), strings.Repeat("x", 63)},
		{strings.Repeat("x", 100), strings.Repeat("x", 63)},
		{long, strings.Repeat("a", 62)}, // cut after the '-': trimmed
		{strings.Repeat(strings.Repeat("d", 62)+".", 4) + "d", strings.Repeat("d", 62)},
	} {
		got := DeriveHostname(tc.name)
		if got != tc.want {
			t.Errorf("DeriveHostname(%q) = %q, want %q", tc.name, got, tc.want)
		}
		if errs := utilvalidation.IsDNS1123Label(got); len(errs) > 0 {
			t.Errorf("DeriveHostname(%q) = %q: not a DNS-1123 label: %v", tc.name, got, errs)
		}
	}
}
