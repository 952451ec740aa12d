package main

import (
	"flag"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kemu-dev/kemu/controller/migration"
)

// migrationOptions are the migration controller's flags (kemu-config's
// migration keys; KubeVirt's defaults).
type migrationOptions struct {
	perCluster, outboundPerNode              int
	bandwidth                                string
	completionTimeoutPerGiB, progressTimeout int64
	allowAutoConverge, allowPostCopy         bool
	unschedulableTimeout, pendingTimeout     time.Duration
	allowSameNode                            bool
	bandwidthQuantity                        resource.Quantity
}

func bindMigrationFlags(fs *flag.FlagSet, o *migrationOptions) {
	fs.IntVar(&o.perCluster, "parallel-migrations-per-cluster", migration.DefaultParallelMigrationsPerCluster,
		"migrations with a target Pod at once in the cluster (kemu-config parallelMigrationsPerCluster)")
	fs.IntVar(&o.outboundPerNode, "parallel-outbound-migrations-per-node", migration.DefaultParallelOutboundMigrationsPerNode,
		"migrations with a target Pod at once leaving one node (kemu-config parallelOutboundMigrationsPerNode)")
	fs.StringVar(&o.bandwidth, "bandwidth-per-migration", "0",
		"bandwidth cap of one migration, bytes per second as a quantity (64Mi); 0 is unlimited (kemu-config bandwidthPerMigration)")
	fs.Int64Var(&o.completionTimeoutPerGiB, "completion-timeout-per-gib", migration.DefaultCompletionTimeoutPerGiB,
		"seconds per GiB of RAM and copied disks a migration may take (kemu-config completionTimeoutPerGiB)")
	fs.Int64Var(&o.progressTimeout, "progress-timeout", migration.DefaultProgressTimeout,
		"seconds without progress before a migration is canceled (kemu-config progressTimeout)")
	fs.BoolVar(&o.allowAutoConverge, "allow-auto-converge", false, "let QEMU throttle the guest's vCPUs to converge (kemu-config allowAutoConverge)")
	fs.BoolVar(&o.allowPostCopy, "allow-post-copy", false, "switch to post-copy at the completion timeout (kemu-config allowPostCopy)")
	fs.DurationVar(&o.unschedulableTimeout, "migration-unschedulable-timeout", migration.DefaultUnschedulableTimeout,
		"a migration fails when its target Pod stays unschedulable this long (kemu-config migrationUnschedulableTimeout)")
	fs.DurationVar(&o.pendingTimeout, "migration-pending-timeout", migration.DefaultPendingTimeout,
		"a migration fails when its target Pod stays Pending this long (kemu-config migrationPendingTimeout)")
	fs.BoolVar(&o.allowSameNode, "migration-allow-same-node", false,
		"tests only: let a target Pod run on its source node (drops the affinity against it)")
}

func (o *migrationOptions) validate() error {
	if o.perCluster < 1 {
		return fmt.Errorf("--parallel-migrations-per-cluster %d: must be at least 1", o.perCluster)
	}
	if o.outboundPerNode < 1 {
		return fmt.Errorf("--parallel-outbound-migrations-per-node %d: must be at least 1", o.outboundPerNode)
	}
	q, err := resource.ParseQuantity(o.bandwidth)
	if err != nil || q.Sign() < 0 {
		return fmt.Errorf("--bandwidth-per-migration %q: want a quantity of at least 0", o.bandwidth)
	}
	o.bandwidthQuantity = q
	if o.completionTimeoutPerGiB < 1 || o.progressTimeout < 1 {
		return fmt.Errorf("--completion-timeout-per-gib and --progress-timeout must be at least 1 (seconds)")
	}
	if o.unschedulableTimeout <= 0 || o.pendingTimeout <= 0 {
		return fmt.Errorf("--migration-unschedulable-timeout and --migration-pending-timeout must be positive")
	}
	return nil
}

// config completes the controller's config with the options.
func (o *migrationOptions) config(c migration.Config) migration.Config {
	c.Limits = migration.Limits{PerCluster: o.perCluster, OutboundPerNode: o.outboundPerNode}
	c.Timeouts = migration.Timeouts{Unschedulable: o.unschedulableTimeout, Pending: o.pendingTimeout}
	c.Policy = migration.Policy{BandwidthPerMigration: o.bandwidthQuantity, CompletionTimeoutPerGiB: o.completionTimeoutPerGiB,
		ProgressTimeout: o.progressTimeout, AllowAutoConverge: o.allowAutoConverge, AllowPostCopy: o.allowPostCopy}
	c.AllowSameNode = o.allowSameNode
	return c
}
