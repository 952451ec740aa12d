package vm

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/kube/cdi"
	"github.com/kemu-dev/kemu/kube/vmistatus"
)

func dvIn(phase cdi.Phase) *cdi.DataVolume { return &cdi.DataVolume{Name: "d", Phase: phase} }

func withDVCond(dv *cdi.DataVolume, c cdi.Condition) *cdi.DataVolume {
	dv.Conditions = append(dv.Conditions, c)
	return dv
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestBackoffDelay(t *testing.T) {
	b := backoff{base: 10 * time.Second, max: 5 * time.Minute}
	for n, want := range map[int]time.Duration{0: 10 * time.Second, 1: 10 * time.Second, 2: 20 * time.Second,
		3: 40 * time.Second, 4: 80 * time.Second, 5: 160 * time.Second, 6: 5 * time.Minute, 7: 5 * time.Minute,
		64: 5 * time.Minute, 1000: 5 * time.Minute} {
		if got := b.delay(n, 0.99); got != want {
			t.Errorf("delay(%d) = %s, want %s", n, got, want)
		}
	}
	b.jitter = 0.5
	for _, c := range []struct {
		n    int
		r    float64
		want time.Duration
	}{{1, 0, 10 * time.Second}, {1, 0.5, 12500 * time.Millisecond}, {2, 0.9, 29 * time.Second},
		{5, 0.9, 232 * time.Second}, {6, 0.1, 5 * time.Minute}, {9, 0.1, 5 * time.Minute}} {
		if got := b.delay(c.n, c.r); got != c.want {
			t.Errorf("jitter: delay(%d, %v) = %s, want %s", c.n, c.r, got, c.want)
		}
	}
}

func vmiIn(uid string, phase v1.VirtualMachineInstancePhase, ran bool) *v1.VirtualMachineInstance {
	vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "vm", UID: types.UID(uid)}}
	vmi.Status.Phase = phase
	if ran {
		vmi.Status.PhaseTransitionTimestamps = []v1.VirtualMachineInstancePhaseTransitionTimestamp{{Phase: v1.Running}}
	}
	return vmi
}

func TestNextStartFailure(t *testing.T) {
	delay := func(n int) time.Duration { return time.Duration(n) * time.Minute }
	old := &StartFailure{ConsecutiveFailCount: 2, LastFailedVMIUID: "a"}
	for _, c := range []struct {
		name      string
		rs        v1.VirtualMachineRunStrategy
		sf        *StartFailure
		vmi       *v1.VirtualMachineInstance
		wantCount int // -1: unchanged record (same pointer)
	}{
		{"first failure", v1.RunStrategyAlways, nil, vmiIn("a", v1.Failed, false), 1},
		{"Always counts Succeeded without running", v1.RunStrategyAlways, nil, vmiIn("a", v1.Succeeded, false), 1},
		{"next failure", v1.RunStrategyAlways, old, vmiIn("b", v1.Failed, false), 3},
		{"same VMI counted once", v1.RunStrategyAlways, old, vmiIn("a", v1.Failed, false), -1},
		{"ran: cleared", v1.RunStrategyAlways, old, vmiIn("b", v1.Failed, true), 0},
		{"running now: cleared", v1.RunStrategyAlways, old, vmiIn("b", v1.Running, false), 0},
		{"no VMI: kept", v1.RunStrategyAlways, old, nil, -1},
		{"still starting: kept", v1.RunStrategyAlways, old, vmiIn("b", v1.Scheduled, false), -1},
		{"RerunOnFailure counts Failed", v1.RunStrategyRerunOnFailure, nil, vmiIn("a", v1.Failed, false), 1},
		{"RerunOnFailure ignores Succeeded", v1.RunStrategyRerunOnFailure, nil, vmiIn("a", v1.Succeeded, false), 0},
		{"Manual never counts", v1.RunStrategyManual, old, vmiIn("b", v1.Failed, false), 0},
		{"Once never counts", v1.RunStrategyOnce, nil, vmiIn("b", v1.Failed, false), 0},
		{"Halted clears", v1.RunStrategyHalted, old, nil, 0},
	} {
		got := nextStartFailure(c.rs, c.sf, c.vmi, t0, delay)
		switch {
		case c.wantCount == -1:
			if got != c.sf {
				t.Errorf("%s: record changed to %+v", c.name, got)
			}
		case c.wantCount == 0:
			if got != nil {
				t.Errorf("%s: got %+v, want none", c.name, got)
			}
		case got == nil || got.ConsecutiveFailCount != c.wantCount || got.LastFailedVMIUID != c.vmi.UID ||
			got.RetryAfter.Sub(t0) != delay(c.wantCount):
			t.Errorf("%s: got %+v, want count %d", c.name, got, c.wantCount)
		}
	}
}

func vmWith(rs v1.VirtualMachineRunStrategy, statusRS v1.VirtualMachineRunStrategy, reqs ...v1.VirtualMachineStateChangeRequest) *v1.VirtualMachine {
	vm := &v1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "vm", Generation: 3}}
	vm.Spec.RunStrategy = &rs
	vm.Status.RunStrategy = statusRS
	vm.Status.StateChangeRequests = reqs
	return vm
}

func stopOf(uid string) v1.VirtualMachineStateChangeRequest {
	return v1.VirtualMachineStateChangeRequest{Action: v1.StopRequest, UID: &uid}
}

var startReq = v1.VirtualMachineStateChangeRequest{Action: v1.StartRequest}

func deleting(vmi *v1.VirtualMachineInstance) *v1.VirtualMachineInstance {
	now := metav1.NewTime(t0)
	vmi.DeletionTimestamp = &now
	return vmi
}

func TestDecide(t *testing.T) {
	const (
		Always = v1.RunStrategyAlways
		Rerun  = v1.RunStrategyRerunOnFailure
		Manual = v1.RunStrategyManual
		Once   = v1.RunStrategyOnce
		Halted = v1.RunStrategyHalted
	)
	backingOff := &StartFailure{ConsecutiveFailCount: 1, RetryAfter: t0.Add(7 * time.Second)}
	expired := &StartFailure{ConsecutiveFailCount: 1, RetryAfter: t0.Add(-time.Second)}
	deletedVM := vmWith(Always, Always)
	deletedVM.DeletionTimestamp = &metav1.Time{Time: t0}
	for _, c := range []struct {
		name       string
		vm         *v1.VirtualMachine
		vmi        *v1.VirtualMachineInstance
		sf         *StartFailure
		want       action
		startAfter bool
		wait       time.Duration
	}{
		{"Always: no VMI starts", vmWith(Always, ""), nil, nil, actCreate, false, 0},
		{"Always: running stays", vmWith(Always, Always), vmiIn("a", v1.Running, true), nil, actNone, false, 0},
		{"Always: Succeeded is replaced", vmWith(Always, Always), vmiIn("a", v1.Succeeded, true), nil, actDelete, false, 0},
		{"Always: Failed is replaced", vmWith(Always, Always), vmiIn("a", v1.Failed, true), nil, actDelete, false, 0},
		{"Always: restart request", vmWith(Always, Always, stopOf("a"), startReq), vmiIn("a", v1.Running, true), nil, actDelete, false, 0},
		{"Always: stop request of another VMI", vmWith(Always, Always, stopOf("z")), vmiIn("a", v1.Running, true), nil, actNone, false, 0},
		{"Always: deleting VMI is waited for", vmWith(Always, Always), deleting(vmiIn("a", v1.Failed, false)), nil, actNone, false, 0},
		{"Always: back-off holds the start", vmWith(Always, Always), nil, backingOff, actWait, false, 7 * time.Second},
		{"Always: back-off over", vmWith(Always, Always), nil, expired, actCreate, false, 0},
		{"Rerun: new VM starts", vmWith(Rerun, ""), nil, nil, actCreate, false, 0},
		{"Rerun: from Halted starts", vmWith(Rerun, Halted), nil, nil, actCreate, false, 0},
		{"Rerun: ended stays stopped", vmWith(Rerun, Rerun), nil, nil, actNone, false, 0},
		{"Rerun: start request", vmWith(Rerun, Rerun, startReq), nil, nil, actCreate, false, 0},
		{"Rerun: start request in back-off", vmWith(Rerun, Rerun, startReq), nil, backingOff, actWait, false, 7 * time.Second},
		{"Rerun: Failed is deleted and restarted", vmWith(Rerun, Rerun), vmiIn("a", v1.Failed, true), nil, actDelete, true, 0},
		{"Rerun: Succeeded is deleted", vmWith(Rerun, Rerun), vmiIn("a", v1.Succeeded, true), nil, actDelete, false, 0},
		{"Rerun: restart request", vmWith(Rerun, Rerun, stopOf("a"), startReq), vmiIn("a", v1.Running, true), nil, actDelete, false, 0},
		{"Rerun: running stays", vmWith(Rerun, Rerun), vmiIn("a", v1.Running, true), nil, actNone, false, 0},
		{"Manual: nothing without request", vmWith(Manual, ""), nil, nil, actNone, false, 0},
		{"Manual: start request", vmWith(Manual, "", startReq), nil, nil, actCreate, false, 0},
		{"Manual: start ignores back-off", vmWith(Manual, "", startReq), nil, backingOff, actCreate, false, 0},
		{"Manual: stop request", vmWith(Manual, Manual, stopOf("a")), vmiIn("a", v1.Running, true), nil, actDelete, false, 0},
		{"Manual: ended VMI stays", vmWith(Manual, Manual), vmiIn("a", v1.Failed, false), nil, actNone, false, 0},
		{"Once: starts", vmWith(Once, ""), nil, nil, actCreate, false, 0},
		{"Once: failed VMI stays", vmWith(Once, Once), vmiIn("a", v1.Failed, false), nil, actNone, false, 0},
		{"Once: stop request ignored", vmWith(Once, Once, stopOf("a")), vmiIn("a", v1.Running, true), nil, actNone, false, 0},
		{"Halted: VMI deleted", vmWith(Halted, Always), vmiIn("a", v1.Running, true), nil, actDelete, false, 0},
		{"Halted: nothing to do", vmWith(Halted, Always, startReq), nil, nil, actNone, false, 0},
		{"VM deleted: VMI deleted", deletedVM, vmiIn("a", v1.Running, true), nil, actDelete, false, 0},
		{"VM deleted: never starts", deletedVM, nil, nil, actNone, false, 0},
	} {
		d := decide(runStrategyOf(c.vm), c.vm, c.vmi, c.sf, t0)
		if d.action != c.want || d.startAfterDelete != c.startAfter || d.wait != c.wait {
			t.Errorf("%s: got %s (startAfterDelete %v, wait %s), want %s (%v, %s)", c.name, d.action,
				d.startAfterDelete, d.wait, c.want, c.startAfter, c.wait)
		}
	}
}

func TestRunStrategyOf(t *testing.T) {
	yes, no := true, false
	rerun := v1.RunStrategyRerunOnFailure
	for _, c := range []struct {
		spec v1.VirtualMachineSpec
		want v1.VirtualMachineRunStrategy
	}{{v1.VirtualMachineSpec{}, v1.RunStrategyHalted}, {v1.VirtualMachineSpec{Running: &yes}, v1.RunStrategyAlways},
		{v1.VirtualMachineSpec{Running: &no}, v1.RunStrategyHalted}, {v1.VirtualMachineSpec{RunStrategy: &rerun}, rerun}} {
		if got := runStrategyOf(&v1.VirtualMachine{Spec: c.spec}); got != c.want {
			t.Errorf("%+v: %s, want %s", c.spec, got, c.want)
		}
	}
}

func withConds(vmi *v1.VirtualMachineInstance, conds ...v1.VirtualMachineInstanceCondition) *v1.VirtualMachineInstance {
	vmi.Status.Conditions = conds
	return vmi
}

func cond(t v1.VirtualMachineInstanceConditionType, s corev1.ConditionStatus, reason string) v1.VirtualMachineInstanceCondition {
	return v1.VirtualMachineInstanceCondition{Type: t, Status: s, Reason: reason}
}

func TestPrintableStatus(t *testing.T) {
	Always := v1.RunStrategyAlways
	backingOff := &StartFailure{ConsecutiveFailCount: 2, RetryAfter: t0.Add(time.Minute)}
	over := &StartFailure{ConsecutiveFailCount: 2, RetryAfter: t0.Add(-time.Second)}
	deletedVM := vmWith(Always, Always)
	deletedVM.DeletionTimestamp = &metav1.Time{Time: t0}
	migratingVMI := vmiIn("a", v1.Running, true)
	migratingVMI.Status.MigrationState = &v1.VirtualMachineInstanceMigrationState{StartTimestamp: &metav1.Time{Time: t0}}
	for _, c := range []struct {
		name          string
		in            statusInput
		want          v1.VirtualMachinePrintableStatus
		ready, create bool
	}{
		{"no VMI", statusInput{rs: v1.RunStrategyHalted}, v1.VirtualMachineStatusStopped, false, false},
		{"create sent", statusInput{rs: Always, startPending: true}, v1.VirtualMachineStatusStarting, false, false},
		{"unprocessed VMI", statusInput{rs: Always, vmi: vmiIn("a", "", false)}, v1.VirtualMachineStatusStarting, false, true},
		{"scheduling", statusInput{rs: Always, vmi: vmiIn("a", v1.Scheduling, false)}, v1.VirtualMachineStatusStarting, false, true},
		{"scheduled", statusInput{rs: Always, vmi: vmiIn("a", v1.Scheduled, false)}, v1.VirtualMachineStatusStarting, false, true},
		{"running, not ready", statusInput{rs: Always, vmi: vmiIn("a", v1.Running, true)}, v1.VirtualMachineStatusRunning, false, true},
		{"running and ready", statusInput{rs: Always, vmi: withConds(vmiIn("a", v1.Running, true),
			cond(v1.VirtualMachineInstanceReady, corev1.ConditionTrue, ""))}, v1.VirtualMachineStatusRunning, true, true},
		{"paused", statusInput{rs: Always, vmi: withConds(vmiIn("a", v1.Running, true),
			cond(v1.VirtualMachineInstancePaused, corev1.ConditionTrue, ""))}, v1.VirtualMachineStatusPaused, false, true},
		{"migrating", statusInput{rs: Always, vmi: migratingVMI}, v1.VirtualMachineStatusMigrating, false, true},
		{"deleting VMI", statusInput{rs: Always, vmi: deleting(vmiIn("a", v1.Running, true))}, v1.VirtualMachineStatusStopping, false, true},
		{"delete sent", statusInput{rs: Always, vmi: vmiIn("a", v1.Running, true), stopPending: true}, v1.VirtualMachineStatusStopping, false, true},
		{"VM deleted", statusInput{vm: deletedVM, rs: Always, vmi: vmiIn("a", v1.Running, true)}, v1.VirtualMachineStatusTerminating, false, true},
		{"unschedulable", statusInput{rs: Always, vmi: withConds(vmiIn("a", v1.Scheduling, false),
			cond("PodScheduled", corev1.ConditionFalse, "Unschedulable"))}, v1.VirtualMachineStatusUnschedulable, false, true},
		{"image pull", statusInput{rs: Always, vmi: withConds(vmiIn("a", v1.Scheduled, false),
			cond(v1.VirtualMachineInstanceSynchronized, corev1.ConditionFalse, "ErrImagePull"))}, v1.VirtualMachineStatusErrImagePull, false, true},
		{"image pull back-off", statusInput{rs: Always, vmi: withConds(vmiIn("a", v1.Scheduled, false),
			cond(v1.VirtualMachineInstanceSynchronized, corev1.ConditionFalse, "ImagePullBackOff"))}, v1.VirtualMachineStatusImagePullBackOff, false, true},
		{"pvc missing", statusInput{rs: Always, vmi: withConds(vmiIn("a", v1.Scheduling, false),
			cond(v1.VirtualMachineInstanceSynchronized, corev1.ConditionFalse, vmistatus.ReasonPVCNotFound))}, v1.VirtualMachineStatusPvcNotFound, false, true},
		{"DataVolume importing", statusInput{rs: Always, dataVolumes: []*cdi.DataVolume{dvIn(cdi.PhaseImportInProgress)}},
			v1.VirtualMachineStatusProvisioning, false, false},
		{"DataVolume without a phase yet", statusInput{rs: Always, dataVolumes: []*cdi.DataVolume{dvIn("")}},
			v1.VirtualMachineStatusProvisioning, false, false},
		{"DataVolume failed", statusInput{rs: Always, dataVolumes: []*cdi.DataVolume{dvIn(cdi.PhaseSucceeded), dvIn(cdi.PhaseFailed)}},
			v1.VirtualMachineStatusDataVolumeError, false, false},
		{"DataVolume importer stopped on an error", statusInput{rs: Always, dataVolumes: []*cdi.DataVolume{
			withDVCond(dvIn(cdi.PhaseImportInProgress), cdi.Condition{Type: cdi.ConditionRunning, Status: "False", Reason: "ImagePullFailed"})}},
			v1.VirtualMachineStatusDataVolumeError, false, false},
		{"DataVolume waits for its first consumer", statusInput{rs: Always, startPending: true,
			dataVolumes: []*cdi.DataVolume{dvIn(cdi.PhaseWaitForFirstConsumer)}}, v1.VirtualMachineStatusStarting, false, false},
		{"DataVolume bound, WaitForFirstConsumer", statusInput{rs: Always, dataVolumes: []*cdi.DataVolume{
			withDVCond(dvIn(cdi.PhaseWaitForFirstConsumer), cdi.Condition{Type: cdi.ConditionBound, Status: "True"})}},
			v1.VirtualMachineStatusProvisioning, false, false},
		{"DataVolume succeeded, running", statusInput{rs: Always, vmi: vmiIn("a", v1.Running, true),
			dataVolumes: []*cdi.DataVolume{dvIn(cdi.PhaseSucceeded)}}, v1.VirtualMachineStatusRunning, false, true},
		{"DataVolume failed while running", statusInput{rs: Always, vmi: vmiIn("a", v1.Running, true),
			dataVolumes: []*cdi.DataVolume{dvIn(cdi.PhaseFailed)}}, v1.VirtualMachineStatusRunning, false, true},
		{"pvc missing beats a DataVolume error", statusInput{rs: Always, vmi: withConds(vmiIn("a", v1.Pending, false),
			cond(v1.VirtualMachineInstanceSynchronized, corev1.ConditionFalse, vmistatus.ReasonPVCNotFound)),
			dataVolumes: []*cdi.DataVolume{dvIn(cdi.PhaseFailed)}}, v1.VirtualMachineStatusPvcNotFound, false, true},
		{"crash loop, no VMI", statusInput{rs: Always, failure: backingOff}, v1.VirtualMachineStatusCrashLoopBackOff, false, false},
		{"crash loop, failed VMI", statusInput{rs: Always, failure: backingOff, vmi: vmiIn("a", v1.Failed, false), stopPending: true},
			v1.VirtualMachineStatusCrashLoopBackOff, false, true},
		{"crash loop over: starting", statusInput{rs: Always, failure: over, startPending: true}, v1.VirtualMachineStatusStarting, false, false},
		{"crash loop over, not started yet", statusInput{rs: Always, failure: over}, v1.VirtualMachineStatusStopped, false, false},
		{"Manual never crash-loops", statusInput{rs: v1.RunStrategyManual, failure: backingOff}, v1.VirtualMachineStatusStopped, false, false},
		{"succeeded", statusInput{rs: v1.RunStrategyOnce, vmi: withConds(vmiIn("a", v1.Succeeded, true),
			cond(v1.VirtualMachineInstanceReady, corev1.ConditionTrue, ""))}, v1.VirtualMachineStatusStopped, false, true},
		{"unknown phase", statusInput{rs: Always, vmi: vmiIn("a", v1.Unknown, true)}, v1.VirtualMachineStatusUnknown, false, true},
	} {
		if c.in.vm == nil {
			c.in.vm = vmWith(c.in.rs, "")
		}
		c.in.now = metav1.NewTime(t0)
		st := computeStatus(c.in)
		if st.PrintableStatus != c.want || st.Ready != c.ready || st.Created != c.create {
			t.Errorf("%s: %s ready=%v created=%v, want %s ready=%v created=%v", c.name, st.PrintableStatus,
				st.Ready, st.Created, c.want, c.ready, c.create)
		}
	}
}

func TestTrimFirstRequest(t *testing.T) {
	noUID := v1.VirtualMachineStateChangeRequest{Action: v1.StopRequest}
	for _, c := range []struct {
		name string
		rs   v1.VirtualMachineRunStrategy
		reqs []v1.VirtualMachineStateChangeRequest
		vmi  *v1.VirtualMachineInstance
		want int // requests left
	}{
		{"none", v1.RunStrategyManual, nil, nil, 0},
		{"stop of a live VMI stays", v1.RunStrategyManual, []v1.VirtualMachineStateChangeRequest{stopOf("a"), startReq}, vmiIn("a", v1.Running, true), 2},
		{"stop done: VMI gone", v1.RunStrategyManual, []v1.VirtualMachineStateChangeRequest{stopOf("a"), startReq}, nil, 1},
		{"stop done: another VMI", v1.RunStrategyManual, []v1.VirtualMachineStateChangeRequest{stopOf("a")}, vmiIn("b", v1.Running, true), 0},
		{"stop without UID", v1.RunStrategyManual, []v1.VirtualMachineStateChangeRequest{noUID}, vmiIn("a", v1.Running, true), 0},
		{"start pending", v1.RunStrategyManual, []v1.VirtualMachineStateChangeRequest{startReq}, nil, 1},
		{"start behind a final VMI", v1.RunStrategyManual, []v1.VirtualMachineStateChangeRequest{startReq}, vmiIn("a", v1.Failed, false), 1},
		{"start behind a deleting VMI", v1.RunStrategyManual, []v1.VirtualMachineStateChangeRequest{startReq}, deleting(vmiIn("a", v1.Running, true)), 1},
		{"start done", v1.RunStrategyRerunOnFailure, []v1.VirtualMachineStateChangeRequest{startReq}, vmiIn("b", v1.Pending, false), 0},
		{"start on Halted dropped", v1.RunStrategyHalted, []v1.VirtualMachineStateChangeRequest{startReq}, nil, 0},
	} {
		vm := vmWith(c.rs, "", c.reqs...)
		st := computeStatus(statusInput{vm: vm, rs: c.rs, vmi: c.vmi, now: metav1.NewTime(t0)})
		if len(st.StateChangeRequests) != c.want {
			t.Errorf("%s: %d requests left, want %d", c.name, len(st.StateChangeRequests), c.want)
		}
	}
}

func TestConditionsKeepTimes(t *testing.T) {
	vm := vmWith(v1.RunStrategyAlways, "")
	first := computeStatus(statusInput{vm: vm, rs: v1.RunStrategyAlways, now: metav1.NewTime(t0),
		syncErr: &syncError{ReasonFailedCreate, "boom"}})
	vm.Status = first
	later := computeStatus(statusInput{vm: vm, rs: v1.RunStrategyAlways, now: metav1.NewTime(t0.Add(time.Hour)),
		syncErr: &syncError{ReasonFailedCreate, "boom"}})
	if len(later.Conditions) != 2 || later.Conditions[0].Type != v1.VirtualMachineReady ||
		later.Conditions[0].Reason != "VMINotExists" || later.Conditions[1].Type != v1.VirtualMachineFailure {
		t.Fatalf("conditions %+v", later.Conditions)
	}
	for i := range later.Conditions {
		if !later.Conditions[i].LastTransitionTime.Equal(&first.Conditions[i].LastTransitionTime) {
			t.Errorf("%s: transition time moved on an unchanged condition", later.Conditions[i].Type)
		}
	}
	vmi := withConds(vmiIn("a", v1.Running, true), cond(v1.VirtualMachineInstanceReady, corev1.ConditionTrue, ""),
		cond(v1.VirtualMachineInstancePaused, corev1.ConditionTrue, "PausedByUser"))
	vm.Status = later
	st := computeStatus(statusInput{vm: vm, rs: v1.RunStrategyAlways, vmi: vmi, now: metav1.NewTime(t0)})
	if len(st.Conditions) != 2 || st.Conditions[0].Status != corev1.ConditionTrue ||
		st.Conditions[1].Type != v1.VirtualMachinePaused || st.Conditions[1].Reason != "PausedByUser" {
		t.Errorf("mirrored conditions %+v (Failure should be gone)", st.Conditions)
	}
}
