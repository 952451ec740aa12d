package vm

import (
	"math/rand/v2"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// StartFailure counts a VM's consecutive failed starts: VMIs that ended
// without ever reaching Running. It is kept in status.startFailure.
type StartFailure struct {
	ConsecutiveFailCount int
	LastFailedVMIUID     types.UID
	// RetryAfter is when the VM may start again (stored to the second).
	RetryAfter time.Time
}

// StartFailureOf reads a VM's start-failure record; nil when it has none.
func StartFailureOf(vm *v1.VirtualMachine) *StartFailure {
	f := vm.Status.StartFailure
	if f == nil {
		return nil
	}
	sf := &StartFailure{ConsecutiveFailCount: f.ConsecutiveFailCount, LastFailedVMIUID: f.LastFailedVMIUID}
	if f.RetryAfterTimestamp != nil {
		sf.RetryAfter = f.RetryAfterTimestamp.Time
	}
	return sf
}

// apiStartFailure is sf as status.startFailure.
func apiStartFailure(sf *StartFailure) *v1.VirtualMachineStartFailure {
	if sf == nil {
		return nil
	}
	t := metav1.NewTime(sf.RetryAfter)
	return &v1.VirtualMachineStartFailure{ConsecutiveFailCount: sf.ConsecutiveFailCount,
		LastFailedVMIUID: sf.LastFailedVMIUID, RetryAfterTimestamp: &t}
}

// backoff computes the wait before the n-th restart after consecutive
// failed starts: base·2^(n-1), plus up to jitter·that at random, at most max.
type backoff struct {
	base, max time.Duration
	jitter    float64
}

// delay is the wait after n consecutive failures; r in [0,1) picks the
// jitter.
func (b backoff) delay(n int, r float64) time.Duration {
	if n < 1 {
		n = 1
	}
	d := b.max
	if n-1 < 62 {
		if x := b.base << (n - 1); x > 0 && x>>(n-1) == b.base && x < b.max {
			d = x
		}
	}
	d += time.Duration(float64(d) * b.jitter * r)
	return min(d, b.max)
}

// restartsAfterFailure says whether a run strategy starts a VM again after
// its VMI failed, so failed starts are counted and backed off.
func restartsAfterFailure(rs v1.VirtualMachineRunStrategy) bool {
	return rs == v1.RunStrategyAlways || rs == v1.RunStrategyRerunOnFailure
}

// everRan says whether the VMI reached Running at some point.
func everRan(vmi *v1.VirtualMachineInstance) bool {
	if vmi == nil {
		return false
	}
	if vmi.Status.Phase == v1.Running {
		return true
	}
	for _, t := range vmi.Status.PhaseTransitionTimestamps {
		if t.Phase == v1.Running {
			return true
		}
	}
	return false
}

// failedStart says whether the VMI ended without ever running, in a way the
// run strategy restarts from: any end for Always, Failed for RerunOnFailure.
func failedStart(rs v1.VirtualMachineRunStrategy, vmi *v1.VirtualMachineInstance) bool {
	if vmi == nil || !vmi.Status.Phase.IsFinal() || everRan(vmi) {
		return false
	}
	switch rs {
	case v1.RunStrategyAlways:
		return true
	case v1.RunStrategyRerunOnFailure:
		return vmi.Status.Phase == v1.Failed
	}
	return false
}

// nextStartFailure is the VM's start-failure record after observing vmi
// (KubeVirt's syncStartFailureStatus): cleared when the VMI ran or the
// strategy never restarts; counted once per failed VMI otherwise. delay
// gives the wait after n failures.
func nextStartFailure(rs v1.VirtualMachineRunStrategy, sf *StartFailure, vmi *v1.VirtualMachineInstance,
	now time.Time, delay func(n int) time.Duration) *StartFailure {
	if !restartsAfterFailure(rs) || everRan(vmi) {
		return nil
	}
	if !failedStart(rs, vmi) || (sf != nil && sf.LastFailedVMIUID == vmi.UID) {
		return sf
	}
	n := 1
	if sf != nil {
		n = sf.ConsecutiveFailCount + 1
	}
	return &StartFailure{ConsecutiveFailCount: n, LastFailedVMIUID: vmi.UID, RetryAfter: now.Add(delay(n))}
}

// remaining is how long the record still holds a start back.
func (sf *StartFailure) remaining(now time.Time) time.Duration {
	if sf == nil {
		return 0
	}
	return max(sf.RetryAfter.Sub(now), 0)
}

func (b backoff) delayFunc() func(n int) time.Duration {
	return func(n int) time.Duration { return b.delay(n, rand.Float64()) }
}
