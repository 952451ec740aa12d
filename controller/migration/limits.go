package migration

import (
	"fmt"

	"k8s.io/apimachinery/pkg/types"
)

// running is a migration that holds (or is getting) a target Pod: it counts
// against the limits.
type running struct {
	uid        types.UID
	sourceNode string
}

// withinLimits says whether a migration (uid) from sourceNode may create its
// target Pod while the migrations in active run, and if not, which limit
// holds it back. Its own entry in active is not counted.
func withinLimits(uid types.UID, sourceNode string, active []running, l Limits) (bool, string) {
	var cluster, node int
	for _, r := range active {
		if r.uid == uid {
			continue
		}
		cluster++
		if r.sourceNode == sourceNode {
			node++
		}
	}
	if cluster >= l.PerCluster {
		return false, fmt.Sprintf("%d migrations run in the cluster (parallelMigrationsPerCluster %d)", cluster, l.PerCluster)
	}
	if node >= l.OutboundPerNode {
		return false, fmt.Sprintf("%d migrations leave node %s (parallelOutboundMigrationsPerNode %d)", node, sourceNode, l.OutboundPerNode)
	}
	return true, ""
}
