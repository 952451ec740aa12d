package evacuation

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/kube/vmistatus"
)

// Labels of the objects this controller makes.
const (
	// BudgetForLabel is on a PodDisruptionBudget kemu keeps for a VMI: the
	// VMI's UID (its owner reference names the VMI).
	BudgetForLabel = "kemu.dev/disruption-budget-for"
	// EvacuationLabel is on a migration created to evacuate a node: the
	// node's name.
	EvacuationLabel = "kemu.dev/evacuation"
)

// Event reasons.
const (
	ReasonEvacuationMigration = "EvacuationMigrationCreated"
	ReasonDisruptionBudget    = "DisruptionBudgetChanged"
)

// strategy is the VMI's eviction strategy ("" → None, KubeVirt's default
// without a cluster-wide one).
func strategy(vmi *v1.VirtualMachineInstance) v1.EvictionStrategy {
	if s := vmi.Spec.EvictionStrategy; s != nil && *s != "" {
		return *s
	}
	return v1.EvictionStrategyNone
}

// migratable says whether the node agent found the VMI live-migratable.
func migratable(vmi *v1.VirtualMachineInstance) bool {
	return vmistatus.HasCondition(vmi, v1.VirtualMachineInstanceIsMigratable, corev1.ConditionTrue, "")
}

// protected says whether the VMI survives a drain, so its launcher Pods
// must not be evicted: LiveMigrate and External always,
// LiveMigrateIfPossible when the VMI can migrate (else it is shut down by
// the drain like None).
func protected(vmi *v1.VirtualMachineInstance) bool {
	switch strategy(vmi) {
	case v1.EvictionStrategyLiveMigrate, v1.EvictionStrategyExternal:
		return true
	case v1.EvictionStrategyLiveMigrateIfPossible:
		return migratable(vmi)
	}
	return false
}

// budget is the VMI's disruption budget: none (0), or the Pods that must
// stay available — one, two while a migration's target Pod exists (the
// source and the target both hold the guest then), as KubeVirt does.
func budget(vmi *v1.VirtualMachineInstance) int32 {
	if vmi.DeletionTimestamp != nil || vmi.Status.Phase.IsFinal() || !protected(vmi) {
		return 0
	}
	if st := vmi.Status.MigrationState; st != nil && st.TargetPod != "" && !st.Completed && !st.Failed {
		return 2
	}
	return 1
}

// cordoned says whether the node is being drained: unschedulable (kubectl
// cordon, drain), or tainted so by the node controller.
func cordoned(node *corev1.Node) bool {
	if node == nil {
		return false
	}
	if node.Spec.Unschedulable {
		return true
	}
	for _, t := range node.Spec.Taints {
		if t.Key == corev1.TaintNodeUnschedulable {
			return true
		}
	}
	return false
}

// plan is what the controller does about a VMI's node.
type plan struct {
	// evacuationNode is status.evacuationNodeName's new value.
	evacuationNode string
	// migrate: create an evacuation migration now.
	migrate bool
	// retryIn: look again after this long (a failed migration's pause).
	retryIn time.Duration
}

// migrations sums up the VMI's migrations for the plan.
type migrations struct {
	active     bool      // one not final
	lastFailed time.Time // the newest failed evacuation migration's end
}

// decide plans the evacuation of vmi on node at now: a running VMI on a
// cordoned node is marked for evacuation when it is protected; it gets a
// migration unless its strategy is External (someone else moves it), it
// is migrating already, or the last evacuation migration failed less than
// retry ago. A VMI that left the node, or a node uncordoned, clears the
// mark.
func decide(vmi *v1.VirtualMachineInstance, node *corev1.Node, m migrations, now time.Time, retry time.Duration) plan {
	if vmi.DeletionTimestamp != nil || vmi.Status.Phase != v1.Running || !cordoned(node) || !protected(vmi) ||
		node.Name != vmi.Status.NodeName {
		return plan{}
	}
	p := plan{evacuationNode: node.Name}
	if strategy(vmi) == v1.EvictionStrategyExternal || m.active {
		return p
	}
	if !m.lastFailed.IsZero() {
		if wait := m.lastFailed.Add(retry).Sub(now); wait > 0 {
			p.retryIn = wait
			return p
		}
	}
	p.migrate = true
	return p
}
