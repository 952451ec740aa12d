package netsetup

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseResolvConf(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		servers  []string
		search   []string
	}{
		{"kubernetes", "search ns1.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n",
			[]string{"10.96.0.10"}, []string{"ns1.svc.cluster.local", "svc.cluster.local", "cluster.local"}},
		{"comments, IPv6 and loopback dropped, last search wins", "# x\nnameserver 127.0.0.53\nnameserver fd00::10\nnameserver 1.1.1.1 # cf\n; y\nsearch a\ndomain b.example\nnameserver 8.8.8.8\n",
			[]string{"1.1.1.1", "8.8.8.8"}, []string{"b.example"}},
		{"empty", "", nil, nil},
	} {
		c, err := parseResolvConf(strings.NewReader(tc.in))
		if err != nil {
			t.Fatal(err)
		}
		var servers []string
		for _, s := range c.Servers {
			servers = append(servers, s.String())
		}
		if !slices.Equal(servers, tc.servers) || !slices.Equal(c.Search, tc.search) {
			t.Errorf("%s: %v %v", tc.name, servers, c.Search)
		}
	}
}

func TestReadResolvConfMissing(t *testing.T) {
	c, err := readResolvConf(filepath.Join(t.TempDir(), "none"))
	if err != nil || len(c.Servers) != 0 {
		t.Errorf("%v %v", c, err)
	}
	p := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(p, []byte("nameserver 10.0.0.10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c, err := readResolvConf(p); err != nil || len(c.Servers) != 1 {
		t.Errorf("%v %v", c, err)
	}
}
