package netsetup

import "strings"

// maxDomainName is the longest domain name (RFC 1035).
const maxDomainName = 253

// withSubdomain puts <subdomain>.<the longest service search domain> first
// in search when the VMI has a subdomain (KubeVirt's
// dns.DomainNameWithSubdomain): the guest resolves its FQDN
// <hostname>.<subdomain>.<namespace>.svc.<cluster domain> and its siblings
// by short name. Nothing is added without a subdomain, without a service
// domain (one holding ".svc."), when that domain already starts with the
// subdomain, or when the name would pass 253 characters.
func withSubdomain(search []string, subdomain string) []string {
	if subdomain == "" {
		return search
	}
	longest := ""
	for _, d := range search {
		if strings.Contains(d, ".svc.") && len(d) > len(longest) {
			longest = d
		}
	}
	if longest == "" || strings.HasPrefix(longest, subdomain+".") {
		return search
	}
	name := subdomain + "." + longest
	if len(name) > maxDomainName {
		return search
	}
	return append([]string{name}, search...)
}
