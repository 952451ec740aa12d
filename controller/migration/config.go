package migration

import (
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// Finalizer keeps a VirtualMachineInstanceMigration until it is final, so
// that deleting it cancels the migration: before TargetReady the target
// Pod is deleted, after it the source node agent is asked to abort.
const Finalizer = "kemu.dev/migration"

// KubeVirt's defaults of its migration configuration.
const (
	DefaultParallelMigrationsPerCluster      = 5
	DefaultParallelOutboundMigrationsPerNode = 2
	DefaultCompletionTimeoutPerGiB           = 150
	DefaultProgressTimeout                   = 150
	DefaultUnschedulableTimeout              = 5 * time.Minute
	DefaultPendingTimeout                    = 15 * time.Minute
)

// Limits bound how many migrations run at once. A migration over a limit
// stays Pending (no target Pod) until one ends.
type Limits struct {
	// PerCluster: migrations past Pending in the whole cluster.
	PerCluster int
	// OutboundPerNode: migrations past Pending whose source is the node.
	OutboundPerNode int
}

// DefaultLimits are KubeVirt's.
func DefaultLimits() Limits {
	return Limits{PerCluster: DefaultParallelMigrationsPerCluster, OutboundPerNode: DefaultParallelOutboundMigrationsPerNode}
}

// Timeouts fail a migration whose target Pod does not start.
type Timeouts struct {
	// Unschedulable: the target Pod marked Unschedulable by the scheduler
	// this long (KubeVirt's 5 min).
	Unschedulable time.Duration
	// Pending: the target Pod Pending this long since it was created, for
	// any reason (KubeVirt's catch-all 15 min).
	Pending time.Duration
}

// DefaultTimeouts are KubeVirt's.
func DefaultTimeouts() Timeouts {
	return Timeouts{Unschedulable: DefaultUnschedulableTimeout, Pending: DefaultPendingTimeout}
}

// Policy is how every migration runs (kemu-config), written into the VMI's
// migrationState.migrationConfiguration at Scheduled for the node agents.
type Policy struct {
	// BandwidthPerMigration caps a migration, bytes per second; zero is
	// unlimited.
	BandwidthPerMigration   resource.Quantity
	CompletionTimeoutPerGiB int64
	ProgressTimeout         int64
	AllowAutoConverge       bool
	AllowPostCopy           bool
}

// DefaultPolicy is KubeVirt's: unlimited bandwidth, 150 s per GiB, 150 s
// without progress, neither auto-converge nor post-copy.
func DefaultPolicy() Policy {
	return Policy{CompletionTimeoutPerGiB: DefaultCompletionTimeoutPerGiB, ProgressTimeout: DefaultProgressTimeout}
}

// Configuration is the policy as the API records it.
func (p Policy) Configuration() *v1.MigrationConfiguration {
	bw := p.BandwidthPerMigration.DeepCopy()
	ct, pt := p.CompletionTimeoutPerGiB, p.ProgressTimeout
	ac, pc := p.AllowAutoConverge, p.AllowPostCopy
	return &v1.MigrationConfiguration{BandwidthPerMigration: &bw, CompletionTimeoutPerGiB: &ct,
		ProgressTimeout: &pt, AllowAutoConverge: &ac, AllowPostCopy: &pc}
}
