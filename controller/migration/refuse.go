package migration

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/kube/vmistatus"
)

// Reasons of a migration's Failed condition, its events and a
// migrationState's failureReason the controller writes.
const (
	ReasonVMINotFound         = "VMINotFound"
	ReasonVMIFinal            = "VMIFinal"
	ReasonVMINotRunning       = "VMINotRunning"
	ReasonVMINotMigratable    = "VMINotMigratable"
	ReasonAlreadyMigrating    = "AlreadyMigrating"
	ReasonSourcePodNotFound   = "SourcePodNotFound"
	ReasonTargetPodFailed     = "TargetPodFailed"
	ReasonTargetPodVanished   = "TargetPodVanished"
	ReasonUnschedulable       = "TargetPodUnschedulable"
	ReasonPendingTimeout      = "TargetPodPendingTimeout"
	ReasonMigrationFailed     = "MigrationFailed"
	ReasonAborted             = "Aborted"
	ReasonFailedCreate        = "FailedCreate"
	ReasonSuccessfulCreate    = "SuccessfulCreate"
	ReasonSuccessfulDelete    = "SuccessfulDelete"
	ReasonFailedDelete        = "FailedDelete"
	ReasonAbortRequested      = "AbortRequested"
	ReasonOverLimit           = "OverLimit"
	ReasonMigrationSucceeded  = "MigrationSucceeded"
	ConditionFailed           = "Failed"
	ConditionAbortRequested   = "AbortRequested"
	ConditionWaitingForLimits = "WaitingForLimits"
)

// vmiStateRefusal says whether reason comes from the VMI's own state (the
// part a lagging cache can get wrong for a new migration).
func vmiStateRefusal(reason string) bool {
	switch reason {
	case ReasonVMINotFound, ReasonVMIFinal, ReasonVMINotRunning, ReasonVMINotMigratable:
		return true
	}
	return false
}

// refusal says why a migration must not start (or go on waiting), "" when
// it may: the VMI missing, final, not Running, not LiveMigratable=True,
// or already migrating — another migration of it that is past Pending (or
// has a target Pod: active), or waits and is older (the older one goes
// first), or a migrationState of another migration neither completed nor
// failed. others are the namespace's other migrations (final ones are
// skipped); active says whether one of them holds a target Pod.
func refusal(m *v1.VirtualMachineInstanceMigration, vmi *v1.VirtualMachineInstance,
	others []*v1.VirtualMachineInstanceMigration, active func(*v1.VirtualMachineInstanceMigration) bool) (reason, msg string) {
	if vmi == nil {
		return ReasonVMINotFound, fmt.Sprintf("VMI %q not found", m.Spec.VMIName)
	}
	if vmi.DeletionTimestamp != nil || vmi.Status.Phase.IsFinal() {
		return ReasonVMIFinal, fmt.Sprintf("VMI %q is %s", vmi.Name, finalWord(vmi))
	}
	if vmi.Status.Phase != v1.Running {
		return ReasonVMINotRunning, fmt.Sprintf("VMI %q is %s, not Running", vmi.Name, phaseWord(vmi.Status.Phase))
	}
	if c, ok := vmistatus.Condition(vmi, v1.VirtualMachineInstanceIsMigratable); !ok || c.Status != corev1.ConditionTrue {
		why := "no LiveMigratable condition"
		if ok {
			why = fmt.Sprintf("LiveMigratable=%s", c.Status)
			if c.Reason != "" {
				why += " (" + c.Reason + ")"
			}
			if c.Message != "" {
				why += ": " + c.Message
			}
		}
		return ReasonVMINotMigratable, fmt.Sprintf("VMI %q is not live migratable: %s", vmi.Name, why)
	}
	if ms := vmi.Status.MigrationState; ms != nil && ms.MigrationUID != "" && ms.MigrationUID != m.UID && !ms.Completed && !ms.Failed {
		return ReasonAlreadyMigrating, fmt.Sprintf("VMI %q is migrating (migration UID %s)", vmi.Name, ms.MigrationUID)
	}
	for _, o := range others {
		if o.UID == m.UID || o.Spec.VMIName != m.Spec.VMIName || o.Status.Phase.IsFinal() {
			continue
		}
		if pastPending(o.Status.Phase) || active(o) || (o.Status.Phase == v1.MigrationPending || o.Status.Phase == v1.MigrationPhaseUnset) && older(o, m) {
			return ReasonAlreadyMigrating, fmt.Sprintf("VMI %q is already being migrated by %s", vmi.Name, o.Name)
		}
	}
	return "", ""
}

func finalWord(vmi *v1.VirtualMachineInstance) string {
	if vmi.DeletionTimestamp != nil {
		return "being deleted"
	}
	return string(vmi.Status.Phase)
}

func phaseWord(p v1.VirtualMachineInstancePhase) string {
	if p == v1.VmPhaseUnset {
		return "new"
	}
	return string(p)
}

// pastPending: the migration has (or had) a target Pod.
func pastPending(p v1.VirtualMachineInstanceMigrationPhase) bool {
	return p != v1.MigrationPhaseUnset && p != v1.MigrationPending && !p.IsFinal()
}

// older orders migrations by creation, then name.
func older(a, b *v1.VirtualMachineInstanceMigration) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}
