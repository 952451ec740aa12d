package main

import (
	"slices"
	"strings"
	"testing"
)

// --host-disk-dirs (kemu-config hostDiskDirs) reaches the webhooks parsed
// as the controller parses it; a bad list stops kemu-api at start.
func TestHostDiskDirsFlag(t *testing.T) {
	for _, c := range []struct {
		arg     string
		want    []string
		wantErr string
	}{
		{"", nil, ""},
		{"/srv/disks,/var/lib/vm-disks", []string{"/srv/disks", "/var/lib/vm-disks"}, ""},
		{"srv/disks", nil, "--host-disk-dirs"},
		{"/srv/../etc", nil, "--host-disk-dirs"},
		{"/", nil, "--host-disk-dirs"},
	} {
		o, err := parseFlags([]string{"--namespace=kemu-system", "--host-disk-dirs=" + c.arg})
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%q: error %v, want one naming %s", c.arg, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.arg, err)
			continue
		}
		if !slices.Equal(o.hostDiskDirs, c.want) {
			t.Errorf("%q: %v, want %v", c.arg, o.hostDiskDirs, c.want)
		}
	}
}
