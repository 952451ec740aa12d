package main

import (
	"strings"
	"testing"
	"time"

	"github.com/kemu-dev/kemu/controller/migration"
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
	if m := o.migration; m.perCluster != 5 || m.outboundPerNode != 2 || !m.bandwidthQuantity.IsZero() ||
		m.completionTimeoutPerGiB != 150 || m.progressTimeout != 150 || m.allowAutoConverge || m.allowPostCopy ||
		m.unschedulableTimeout != 5*time.Minute || m.pendingTimeout != 15*time.Minute || m.allowSameNode {
		t.Errorf("migration defaults %+v", m)
	}
	o, err = parseFlags([]string{"--launcher-image=l:1", "--bandwidth-per-migration=64Mi", "--allow-post-copy"})
	if err != nil {
		t.Fatal(err)
	}
	if c := o.migration.config(migration.Config{}); c.Policy.BandwidthPerMigration.Value() != 64<<20 || !c.Policy.AllowPostCopy {
		t.Errorf("migration policy %+v", c.Policy)
	}
	if o.backendStorage.StorageClass != "" || o.backendStorage.AccessMode != "" {
		t.Errorf("backend storage defaults %+v", o.backendStorage)
	}
	o, err = parseFlags([]string{"--launcher-image=l:1", "--vm-state-storage-class=nfs", "--vm-state-access-mode=ReadWriteOnce"})
	if err != nil || o.backendStorage.StorageClass != "nfs" || o.backendStorage.AccessMode != "ReadWriteOnce" {
		t.Errorf("backend storage %+v %v", o.backendStorage, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--launcher-image=l", "--vm-state-access-mode=rwx"}, "--vm-state-access-mode"},
		{nil, "--launcher-image is required"},
		{[]string{"--launcher-image=l", "--kvm=sometimes"}, "--kvm"},
		{[]string{"--launcher-image=l", "--workers=0"}, "--workers"},
		{[]string{"--launcher-image=l", "extra"}, "unexpected arguments"},
		{[]string{"--launcher-image=l", "--node-heartbeat-timeout=0s"}, "--node-heartbeat-timeout"},
		{[]string{"--launcher-image=l", "--parallel-migrations-per-cluster=0"}, "--parallel-migrations-per-cluster"},
		{[]string{"--launcher-image=l", "--parallel-outbound-migrations-per-node=0"}, "--parallel-outbound-migrations-per-node"},
		{[]string{"--launcher-image=l", "--bandwidth-per-migration=fast"}, "--bandwidth-per-migration"},
		{[]string{"--launcher-image=l", "--bandwidth-per-migration=-1"}, "--bandwidth-per-migration"},
		{[]string{"--launcher-image=l", "--progress-timeout=0"}, "--progress-timeout"},
		{[]string{"--launcher-image=l", "--migration-pending-timeout=0s"}, "--migration-pending-timeout"},
	} {
		if _, err := parseFlags(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseFlags(%q) = %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}
