package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"--launcher-image=l:1"})
	if err != nil {
		t.Fatal(err)
	}
	if o.workers != 4 || o.kvm != "auto" || !o.leaderElect || o.leaseNamespace != "kemu-system" ||
		o.leaseName != "kemu-controller" || o.leaseDuration != 15*time.Second || o.metricsAddr != ":8080" ||
		o.nodeHeartbeatTimeout != 5*time.Minute {
		t.Errorf("defaults %+v", o)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--launcher-image is required"},
		{[]string{"--launcher-image=l", "--kvm=sometimes"}, "--kvm"},
		{[]string{"--launcher-image=l", "--workers=0"}, "--workers"},
		{[]string{"--launcher-image=l", "extra"}, "unexpected arguments"},
		{[]string{"--launcher-image=l", "--node-heartbeat-timeout=0s"}, "--node-heartbeat-timeout"},
	} {
		if _, err := parseFlags(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseFlags(%q) = %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}
