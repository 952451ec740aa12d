package netsetup

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"strings"
)

// DNSConfig is what the guest learns about DNS.
type DNSConfig struct {
	Servers []netip.Addr // IPv4 only: DHCPv4 cannot carry others
	Search  []string
}

// readResolvConf reads path; a missing file gives an empty config.
func readResolvConf(path string) (DNSConfig, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return DNSConfig{}, nil
	}
	if err != nil {
		return DNSConfig{}, fmt.Errorf("reading DNS settings: %w", err)
	}
	defer f.Close()
	return parseResolvConf(f)
}

// parseResolvConf takes the IPv4 nameservers (loopback ones mean nothing to
// the guest and are dropped) and the last search or domain line, as the
// resolver does.
func parseResolvConf(r io.Reader) (DNSConfig, error) {
	var c DNSConfig
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexAny(line, "#;"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "nameserver":
			a, err := netip.ParseAddr(f[1])
			if err != nil || !a.Is4() || a.IsLoopback() || a.IsUnspecified() {
				continue
			}
			c.Servers = append(c.Servers, a)
		case "search":
			c.Search = append([]string(nil), f[1:]...)
		case "domain":
			c.Search = []string{f[1]}
		}
	}
	if err := sc.Err(); err != nil {
		return DNSConfig{}, fmt.Errorf("reading DNS settings: %w", err)
	}
	return c, nil
}
