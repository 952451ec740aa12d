package vm

import (
	"time"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// action is what a reconcile does to the VMI.
type action int

const (
	actNone   action = iota
	actCreate        // create the VMI from the template
	actDelete        // delete the VMI
	actWait          // the VM should start, but its start back-off holds it
)

func (a action) String() string {
	return [...]string{"none", "create", "delete", "wait"}[a]
}

// decision is the outcome of decide.
type decision struct {
	action action
	// startAfterDelete asks to queue a Start request before deleting, so
	// the VM starts again once the VMI is gone (RerunOnFailure after a
	// failure).
	startAfterDelete bool
	// wait is the back-off left, for actWait.
	wait time.Duration
}

// runStrategyOf is the VM's run strategy after defaulting (spec.running
// true/false is Always/Halted; none is Halted).
func runStrategyOf(vm *v1.VirtualMachine) v1.VirtualMachineRunStrategy {
	switch {
	case vm.Spec.RunStrategy != nil:
		return *vm.Spec.RunStrategy
	case vm.Spec.Running != nil && *vm.Spec.Running:
		return v1.RunStrategyAlways
	}
	return v1.RunStrategyHalted
}

// hasStartRequest says whether the first state change request is a Start.
func hasStartRequest(vm *v1.VirtualMachine) bool {
	r := vm.Status.StateChangeRequests
	return len(r) > 0 && r[0].Action == v1.StartRequest
}

// hasStopRequestFor says whether the first state change request is a Stop of
// this very VMI.
func hasStopRequestFor(vm *v1.VirtualMachine, vmi *v1.VirtualMachineInstance) bool {
	r := vm.Status.StateChangeRequests
	return vmi != nil && len(r) > 0 && r[0].Action == v1.StopRequest && r[0].UID != nil &&
		*r[0].UID == string(vmi.UID)
}

// decide applies the run strategy (KubeVirt's syncRunStrategy) to the VM
// and its VMI (nil when there is none), given the start-failure record.
func decide(rs v1.VirtualMachineRunStrategy, vm *v1.VirtualMachine, vmi *v1.VirtualMachineInstance,
	sf *StartFailure, now time.Time) decision {
	live := vmi != nil && vmi.DeletionTimestamp == nil
	final := vmi != nil && vmi.Status.Phase.IsFinal()
	stopReq := hasStopRequestFor(vm, vmi)
	del := decision{action: actDelete}
	start := func() decision {
		if wait := sf.remaining(now); wait > 0 {
			return decision{action: actWait, wait: wait}
		}
		return decision{action: actCreate}
	}

	if vm.DeletionTimestamp != nil {
		if live {
			return del
		}
		return decision{}
	}
	switch rs {
	case v1.RunStrategyAlways:
		// A VMI always runs: one that ended (or is asked to stop, which is
		// a restart) is deleted and a new one created.
		if vmi != nil {
			if live && (final || stopReq) {
				return del
			}
			return decision{}
		}
		return start()
	case v1.RunStrategyRerunOnFailure:
		// Ended VMIs are deleted; only a failed one is started again.
		if vmi != nil {
			if live && (final || stopReq) {
				del.startAfterDelete = vmi.Status.Phase == v1.Failed && !stopReq
				return del
			}
			return decision{}
		}
		// Without a VMI start on request, or when the VM just came to
		// this strategy (status.runStrategy still says another).
		if !hasStartRequest(vm) && vm.Status.RunStrategy == rs {
			return decision{}
		}
		return start()
	case v1.RunStrategyManual:
		// Started and stopped only on request; an ended VMI stays.
		if vmi != nil {
			if live && stopReq {
				return del
			}
			return decision{}
		}
		if hasStartRequest(vm) {
			return decision{action: actCreate}
		}
		return decision{}
	case v1.RunStrategyOnce:
		// One VMI, whatever its end; it is not deleted.
		if vmi == nil {
			return decision{action: actCreate}
		}
		return decision{}
	default: // Halted
		if live {
			return del
		}
		return decision{}
	}
}
