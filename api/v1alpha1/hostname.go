package v1alpha1

import "strings"

// MaxHostnameLength is the longest host name kemu gives a guest and its
// launcher Pod: a DNS-1123 label (Pod spec.hostname must be one; Linux's
// sethostname takes at most 64 bytes).
const MaxHostnameLength = 63

// DeriveHostname returns the host name of a VMI named name, the same for
// its launcher Pod (spec.hostname), the guest's DHCP lease (option 12) and
// cloud-init's local-hostname: KubeVirt's rule (dns.SanitizeHostname) — the
// name up to its first dot, at most 63 characters — with a trailing '-' of
// a cut name trimmed, so every object name (a DNS-1123 subdomain) gives a
// DNS-1123 label. "web.example.com" is "web".
func DeriveHostname(name string) string {
	h, _, _ := strings.Cut(name, ".")
	if len(h) > MaxHostnameLength {
		h = strings.TrimRight(h[:MaxHostnameLength], "-")
	}
	return h
}
