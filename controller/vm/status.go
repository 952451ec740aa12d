package vm

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/kube/cdi"
	"github.com/kemu-dev/kemu/kube/vmistatus"
)

// VMI condition types and reasons the VM's printableStatus reads (the
// VMI controller mirrors them from the launcher Pod, as KubeVirt's does).
const vmiPodScheduled v1.VirtualMachineInstanceConditionType = "PodScheduled"

const (
	reasonUnschedulable    = "Unschedulable"
	reasonErrImagePull     = "ErrImagePull"
	reasonImagePullBackOff = "ImagePullBackOff"
)

// Reasons of the VM's Failure condition and events.
const (
	ReasonFailedCreate    = "FailedCreate"
	ReasonFailedDelete    = "FailedDelete"
	ReasonInvalidTemplate = "InvalidTemplate"
	ReasonVMIConflict     = "VMIConflict"
	ReasonCreated         = "SuccessfulCreate"
	ReasonDeleted         = "SuccessfulDelete"
	ReasonBackoff         = "CrashLoopBackOff"
)

// syncError is a reconcile failure the VM's Failure condition reports.
type syncError struct {
	reason, message string
}

func (e *syncError) Error() string { return e.message }

// statusInput is everything the VM's status is derived from.
type statusInput struct {
	vm *v1.VirtualMachine
	rs v1.VirtualMachineRunStrategy
	// vmi is the VM's own VMI, nil when it has none.
	vmi *v1.VirtualMachineInstance
	// startPending/stopPending: a VMI create/delete was sent and not yet
	// observed.
	startPending, stopPending bool
	failure                   *StartFailure
	// dataVolumes are the DataVolumes of the template's dataVolume volumes
	// found in the cache (none without CDI).
	dataVolumes []*cdi.DataVolume
	syncErr     *syncError
	now         metav1.Time
}

// computeStatus derives the VM's new status.
func computeStatus(in statusInput) v1.VirtualMachineStatus {
	st := *in.vm.Status.DeepCopy()
	vmi := in.vmi
	st.Created = vmi != nil
	st.Ready = vmi != nil && !vmi.Status.Phase.IsFinal() && vmistatus.HasCondition(vmi, v1.VirtualMachineInstanceReady, corev1.ConditionTrue, "")
	// Like KubeVirt, status.runStrategy appears once a VMI was created, so
	// RerunOnFailure can tell "never started" from "ended".
	if st.RunStrategy != "" || st.Created {
		st.RunStrategy = in.rs
	}
	if trimFirstRequest(in.rs, &st, vmi) {
		st.StateChangeRequests = st.StateChangeRequests[1:]
		if len(st.StateChangeRequests) == 0 {
			st.StateChangeRequests = nil
		}
	}
	st.Conditions = syncConditions(st.Conditions, vmi, in.syncErr, in.now)
	st.PrintableStatus = printableStatus(in)
	st.ObservedGeneration = in.vm.Generation
	return st
}

// trimFirstRequest says whether the first state change request is done (or
// can never be acted on) and goes.
func trimFirstRequest(rs v1.VirtualMachineRunStrategy, st *v1.VirtualMachineStatus, vmi *v1.VirtualMachineInstance) bool {
	if len(st.StateChangeRequests) == 0 {
		return false
	}
	r := st.StateChangeRequests[0]
	switch r.Action {
	case v1.StopRequest:
		// Done once that VMI is gone; a Stop without a UID means nothing.
		return vmi == nil || r.UID == nil || *r.UID != string(vmi.UID)
	case v1.StartRequest:
		// Done once a VMI runs; Halted and Once never start on request.
		if rs == v1.RunStrategyHalted || rs == v1.RunStrategyOnce {
			return true
		}
		return vmi != nil && vmi.DeletionTimestamp == nil && !vmi.Status.Phase.IsFinal()
	}
	return true // unknown action
}

// printableStatus is KubeVirt's: the first that applies, in this order.
func printableStatus(in statusInput) v1.VirtualMachinePrintableStatus {
	vm, vmi := in.vm, in.vmi
	final := vmi != nil && vmi.Status.Phase.IsFinal()
	running := vmi != nil && vmi.Status.Phase == v1.Running
	paused := vmistatus.HasCondition(vmi, v1.VirtualMachineInstancePaused, corev1.ConditionTrue, "")
	switch {
	case vm.DeletionTimestamp != nil:
		return v1.VirtualMachineStatusTerminating
	case vmi != nil && !final && (vmi.DeletionTimestamp != nil || in.stopPending):
		return v1.VirtualMachineStatusStopping
	case migrating(vmi):
		return v1.VirtualMachineStatusMigrating
	case running && paused:
		return v1.VirtualMachineStatusPaused
	case running:
		return v1.VirtualMachineStatusRunning
	case vmistatus.HasCondition(vmi, v1.VirtualMachineInstanceSynchronized, corev1.ConditionFalse, vmistatus.ReasonPVCNotFound):
		return v1.VirtualMachineStatusPvcNotFound
	case slices.ContainsFunc(in.dataVolumes, (*cdi.DataVolume).HasError):
		return v1.VirtualMachineStatusDataVolumeError
	case vmistatus.HasCondition(vmi, vmiPodScheduled, corev1.ConditionFalse, reasonUnschedulable):
		return v1.VirtualMachineStatusUnschedulable
	case slices.ContainsFunc(in.dataVolumes, (*cdi.DataVolume).Provisioning):
		return v1.VirtualMachineStatusProvisioning
	case vmistatus.HasCondition(vmi, v1.VirtualMachineInstanceSynchronized, corev1.ConditionFalse, reasonErrImagePull):
		return v1.VirtualMachineStatusErrImagePull
	case vmistatus.HasCondition(vmi, v1.VirtualMachineInstanceSynchronized, corev1.ConditionFalse, reasonImagePullBackOff):
		return v1.VirtualMachineStatusImagePullBackOff
	case vmi == nil && in.startPending:
		return v1.VirtualMachineStatusStarting
	case vmi != nil && !final && vmi.Status.Phase != v1.Unknown:
		// Unset, Pending, Scheduling, Scheduled.
		return v1.VirtualMachineStatusStarting
	case (vmi == nil || final) && !in.startPending && restartsAfterFailure(in.rs) &&
		in.failure != nil && in.failure.ConsecutiveFailCount > 0 && in.failure.remaining(in.now.Time) > 0:
		return v1.VirtualMachineStatusCrashLoopBackOff
	case vmi == nil || final:
		return v1.VirtualMachineStatusStopped
	}
	return v1.VirtualMachineStatusUnknown
}

// migrating says whether a live migration of the VMI is under way.
func migrating(vmi *v1.VirtualMachineInstance) bool {
	if vmi == nil || vmi.Status.MigrationState == nil {
		return false
	}
	m := vmi.Status.MigrationState
	return m.StartTimestamp != nil && m.EndTimestamp == nil && !m.Completed && !m.Failed
}

// syncConditions mirrors the VMI's conditions onto the VM: Ready always
// (False, VMINotExists, without a VMI), every other VMI condition while the
// VMI exists, and Failure while a reconcile fails. The conditions the
// controller makes itself keep their times while unchanged, so a steady VM
// is not rewritten.
func syncConditions(old []v1.VirtualMachineCondition, vmi *v1.VirtualMachineInstance, syncErr *syncError,
	now metav1.Time) []v1.VirtualMachineCondition {
	ours := func(c v1.VirtualMachineCondition) v1.VirtualMachineCondition {
		for _, o := range old {
			if o.Type == c.Type && o.Status == c.Status && o.Reason == c.Reason && o.Message == c.Message {
				c.LastProbeTime, c.LastTransitionTime = o.LastProbeTime, o.LastTransitionTime
			}
		}
		return c
	}
	var mirrored []v1.VirtualMachineCondition
	ready := v1.VirtualMachineCondition{Type: v1.VirtualMachineReady, Status: corev1.ConditionFalse,
		Reason: "VMINotExists", Message: "VMI does not exist", LastProbeTime: now, LastTransitionTime: now}
	readyMirrored := false
	if vmi != nil {
		ready.Reason, ready.Message = "VMIConditionMissing", "VMI is missing the Ready condition"
		for _, c := range vmi.Status.Conditions {
			vc := v1.VirtualMachineCondition{Type: v1.VirtualMachineConditionType(c.Type), Status: c.Status,
				Reason: c.Reason, Message: c.Message, LastProbeTime: c.LastProbeTime, LastTransitionTime: c.LastTransitionTime}
			switch vc.Type {
			case v1.VirtualMachineReady:
				ready, readyMirrored = vc, true
			case v1.VirtualMachineFailure:
			default:
				mirrored = append(mirrored, vc)
			}
		}
	}
	if !readyMirrored {
		ready = ours(ready)
	}
	want := append([]v1.VirtualMachineCondition{ready}, mirrored...)
	if syncErr != nil {
		want = append(want, ours(v1.VirtualMachineCondition{Type: v1.VirtualMachineFailure, Status: corev1.ConditionTrue,
			Reason: syncErr.reason, Message: syncErr.message, LastTransitionTime: now}))
	}
	return want
}
