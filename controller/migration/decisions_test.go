package migration

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func mig(name string, uid types.UID, phase v1.VirtualMachineInstanceMigrationPhase, created time.Time) *v1.VirtualMachineInstanceMigration {
	return &v1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid, CreationTimestamp: metav1.NewTime(created)},
		Spec:       v1.VirtualMachineInstanceMigrationSpec{VMIName: "vm"},
		Status:     v1.VirtualMachineInstanceMigrationStatus{Phase: phase},
	}
}

func runningVMI(migratable corev1.ConditionStatus) *v1.VirtualMachineInstance {
	vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "vm", UID: "vmi-uid"},
		Status: v1.VirtualMachineInstanceStatus{Phase: v1.Running, NodeName: "node-a", LauncherPod: "src"}}
	if migratable != "" {
		vmi.Status.Conditions = []v1.VirtualMachineInstanceCondition{{Type: v1.VirtualMachineInstanceIsMigratable,
			Status: migratable, Reason: "DisksNotLiveMigratable", Message: "hostDisk"}}
	}
	return vmi
}

func TestRefusal(t *testing.T) {
	me := mig("m", "me", v1.MigrationPhaseUnset, t0)
	with := func(f func(*v1.VirtualMachineInstance)) *v1.VirtualMachineInstance {
		vmi := runningVMI(corev1.ConditionTrue)
		f(vmi)
		return vmi
	}
	now := metav1.NewTime(t0)
	for _, tc := range []struct {
		name   string
		vmi    *v1.VirtualMachineInstance
		others []*v1.VirtualMachineInstanceMigration
		holds  types.UID // the other migration holding a target Pod
		want   string
		inMsg  string
	}{
		{name: "migratable", vmi: runningVMI(corev1.ConditionTrue)},
		{name: "no VMI", want: ReasonVMINotFound},
		{name: "VMI failed", vmi: with(func(v *v1.VirtualMachineInstance) { v.Status.Phase = v1.Failed }), want: ReasonVMIFinal},
		{name: "VMI deleted", vmi: with(func(v *v1.VirtualMachineInstance) { v.DeletionTimestamp = &now }), want: ReasonVMIFinal, inMsg: "being deleted"},
		{name: "VMI scheduled", vmi: with(func(v *v1.VirtualMachineInstance) { v.Status.Phase = v1.Scheduled }), want: ReasonVMINotRunning},
		{name: "no LiveMigratable", vmi: runningVMI(""), want: ReasonVMINotMigratable, inMsg: "no LiveMigratable"},
		{name: "LiveMigratable False", vmi: runningVMI(corev1.ConditionFalse), want: ReasonVMINotMigratable, inMsg: "(DisksNotLiveMigratable): hostDisk"},
		{name: "another migrationState running", vmi: with(func(v *v1.VirtualMachineInstance) {
			v.Status.MigrationState = &v1.VirtualMachineInstanceMigrationState{MigrationUID: "old"}
		}), want: ReasonAlreadyMigrating},
		{name: "another migrationState completed", vmi: with(func(v *v1.VirtualMachineInstance) {
			v.Status.MigrationState = &v1.VirtualMachineInstanceMigrationState{MigrationUID: "old", Completed: true}
		})},
		{name: "another migrationState failed", vmi: with(func(v *v1.VirtualMachineInstance) {
			v.Status.MigrationState = &v1.VirtualMachineInstanceMigrationState{MigrationUID: "old", Failed: true}
		})},
		{name: "its own migrationState", vmi: with(func(v *v1.VirtualMachineInstance) {
			v.Status.MigrationState = &v1.VirtualMachineInstanceMigrationState{MigrationUID: "me"}
		})},
		{name: "another migration running", vmi: runningVMI(corev1.ConditionTrue),
			others: []*v1.VirtualMachineInstanceMigration{mig("o", "o", v1.MigrationRunning, t0.Add(time.Hour))}, want: ReasonAlreadyMigrating},
		{name: "an older one pending", vmi: runningVMI(corev1.ConditionTrue),
			others: []*v1.VirtualMachineInstanceMigration{mig("o", "o", v1.MigrationPending, t0.Add(-time.Second))}, want: ReasonAlreadyMigrating},
		{name: "a newer one pending", vmi: runningVMI(corev1.ConditionTrue),
			others: []*v1.VirtualMachineInstanceMigration{mig("o", "o", v1.MigrationPending, t0.Add(time.Second))}},
		{name: "same time: by name", vmi: runningVMI(corev1.ConditionTrue),
			others: []*v1.VirtualMachineInstanceMigration{mig("a", "o", v1.MigrationPhaseUnset, t0)}, want: ReasonAlreadyMigrating},
		{name: "a newer pending one holding a Pod", vmi: runningVMI(corev1.ConditionTrue), holds: "o",
			others: []*v1.VirtualMachineInstanceMigration{mig("o", "o", v1.MigrationPending, t0.Add(time.Second))}, want: ReasonAlreadyMigrating},
		{name: "finished ones", vmi: runningVMI(corev1.ConditionTrue), others: []*v1.VirtualMachineInstanceMigration{
			mig("o", "o", v1.MigrationSucceeded, t0.Add(-time.Hour)), mig("p", "p", v1.MigrationFailed, t0.Add(-time.Hour))}},
		{name: "another VMI's", vmi: runningVMI(corev1.ConditionTrue), others: []*v1.VirtualMachineInstanceMigration{
			func() *v1.VirtualMachineInstanceMigration {
				o := mig("o", "o", v1.MigrationRunning, t0)
				o.Spec.VMIName = "other"
				return o
			}()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			others := append([]*v1.VirtualMachineInstanceMigration{me}, tc.others...)
			reason, msg := refusal(me, tc.vmi, others, func(o *v1.VirtualMachineInstanceMigration) bool { return o.UID == tc.holds })
			if reason != tc.want || !strings.Contains(msg, tc.inMsg) {
				t.Errorf("refusal = %q %q, want %q with %q", reason, msg, tc.want, tc.inMsg)
			}
		})
	}
}

func TestWithinLimits(t *testing.T) {
	l := Limits{PerCluster: 3, OutboundPerNode: 2}
	for _, tc := range []struct {
		name   string
		active []running
		want   bool
		inMsg  string
	}{
		{"none", nil, true, ""},
		{"itself only", []running{{"me", "a"}}, true, ""},
		{"one per node", []running{{"x", "a"}}, true, ""},
		{"node full", []running{{"x", "a"}, {"y", "a"}}, false, "leave node a"},
		{"node full, itself not counted", []running{{"x", "a"}, {"me", "a"}}, true, ""},
		{"cluster full", []running{{"x", "a"}, {"y", "b"}, {"z", "c"}}, false, "parallelMigrationsPerCluster 3"},
		{"other nodes", []running{{"x", "b"}, {"y", "b"}}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, msg := withinLimits("me", "a", tc.active, l)
			if ok != tc.want || !strings.Contains(msg, tc.inMsg) {
				t.Errorf("withinLimits = %v %q, want %v with %q", ok, msg, tc.want, tc.inMsg)
			}
		})
	}
}

func TestProgress(t *testing.T) {
	to := Timeouts{Unschedulable: 5 * time.Minute, Pending: 15 * time.Minute}
	now := t0.Add(time.Minute)
	created := metav1.NewTime(t0)
	pod := func(f func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "tgt", UID: "tgt-uid", CreationTimestamp: created},
			Status: corev1.PodStatus{Phase: corev1.PodPending}}
		if f != nil {
			f(p)
		}
		return p
	}
	bound := func(p *corev1.Pod) { p.Spec.NodeName = "node-b" }
	runningPod := func(p *corev1.Pod) { bound(p); p.Status.Phase = corev1.PodRunning }
	unsched := func(since time.Time) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
				Reason: corev1.PodReasonUnschedulable, Message: "0/2 nodes", LastTransitionTime: metav1.NewTime(since)}}
		}
	}
	vmiWith := func(f func(*v1.VirtualMachineInstanceMigrationState)) *v1.VirtualMachineInstance {
		vmi := runningVMI(corev1.ConditionTrue)
		ms := &v1.VirtualMachineInstanceMigrationState{MigrationUID: "me", SourceNode: "node-a", SourcePod: "src", TargetNode: "node-b", TargetPod: "tgt"}
		if f != nil {
			f(ms)
		}
		vmi.Status.MigrationState = ms
		return vmi
	}
	ts := metav1.NewTime(t0)
	deleted := func(m *v1.VirtualMachineInstanceMigration) *v1.VirtualMachineInstanceMigration {
		m.DeletionTimestamp = &ts
		return m
	}
	for _, tc := range []struct {
		name   string
		m      *v1.VirtualMachineInstanceMigration
		vmi    *v1.VirtualMachineInstance
		target *corev1.Pod
		want   step
	}{
		{"scheduling, unbound", mig("m", "me", v1.MigrationScheduling, t0), runningVMI("True"), pod(nil),
			step{after: 14 * time.Minute}},
		{"scheduling, bound", mig("m", "me", v1.MigrationScheduling, t0), runningVMI("True"), pod(bound),
			step{phase: v1.MigrationScheduled, writeState: true}},
		{"unschedulable, not yet", mig("m", "me", v1.MigrationScheduling, t0), runningVMI("True"), pod(unsched(t0)),
			step{after: 4 * time.Minute}},
		{"unschedulable too long", mig("m", "me", v1.MigrationScheduling, t0), runningVMI("True"), pod(unsched(t0.Add(-5 * time.Minute))),
			step{phase: v1.MigrationFailed, reason: ReasonUnschedulable, failState: true, deleteTarget: true}},
		{"pending too long", mig("m", "me", v1.MigrationScheduled, t0), vmiWith(nil), pod(func(p *corev1.Pod) {
			bound(p)
			p.CreationTimestamp = metav1.NewTime(t0.Add(-15 * time.Minute))
		}), step{phase: v1.MigrationFailed, reason: ReasonPendingTimeout, failState: true, deleteTarget: true}},
		{"scheduled, running Pod", mig("m", "me", v1.MigrationScheduled, t0), vmiWith(nil), pod(runningPod),
			step{phase: v1.MigrationPreparingTarget}},
		{"preparing, no address", mig("m", "me", v1.MigrationPreparingTarget, t0), vmiWith(nil), pod(runningPod), step{}},
		{"preparing, address without port", mig("m", "me", v1.MigrationPreparingTarget, t0),
			vmiWith(func(ms *v1.VirtualMachineInstanceMigrationState) { ms.TargetNodeAddress = "10.0.0.2" }), pod(runningPod), step{}},
		{"target ready", mig("m", "me", v1.MigrationPreparingTarget, t0),
			vmiWith(func(ms *v1.VirtualMachineInstanceMigrationState) {
				ms.TargetNodeAddress, ms.TargetMigrationPort = "10.0.0.2", 4444
			}),
			pod(runningPod), step{phase: v1.MigrationTargetReady}},
		{"another migration's state says nothing", mig("m", "me", v1.MigrationPreparingTarget, t0),
			vmiWith(func(ms *v1.VirtualMachineInstanceMigrationState) {
				ms.MigrationUID, ms.TargetNodeAddress, ms.TargetMigrationPort, ms.Failed = "other", "10.0.0.2", 4444, true
			}), pod(runningPod), step{}},
		{"started", mig("m", "me", v1.MigrationTargetReady, t0),
			vmiWith(func(ms *v1.VirtualMachineInstanceMigrationState) { ms.StartTimestamp = &ts }), pod(runningPod),
			step{phase: v1.MigrationRunning}},
		{"completed, target not ready", mig("m", "me", v1.MigrationRunning, t0),
			vmiWith(func(ms *v1.VirtualMachineInstanceMigrationState) { ms.Completed = true }), pod(runningPod), step{}},
		{"completed and target ready", mig("m", "me", v1.MigrationRunning, t0),
			vmiWith(func(ms *v1.VirtualMachineInstanceMigrationState) {
				ms.Completed, ms.TargetNodeDomainReadyTimestamp = true, &ts
			}),
			pod(runningPod), step{phase: v1.MigrationSucceeded, reason: ReasonMigrationSucceeded, handoff: true}},
		{"failed by a node agent", mig("m", "me", v1.MigrationRunning, t0),
			vmiWith(func(ms *v1.VirtualMachineInstanceMigrationState) { ms.Failed, ms.FailureReason = true, "target gone" }),
			pod(runningPod), step{phase: v1.MigrationFailed, reason: ReasonMigrationFailed, deleteTarget: true}},
		{"running without its migrationState", mig("m", "me", v1.MigrationRunning, t0), runningVMI("True"), pod(runningPod),
			step{phase: v1.MigrationFailed, reason: ReasonMigrationFailed, deleteTarget: true}},
		{"canceled when running without its migrationState", deleted(mig("m", "me", v1.MigrationRunning, t0)), runningVMI("True"), pod(runningPod),
			step{phase: v1.MigrationFailed, reason: ReasonMigrationFailed, deleteTarget: true}},
		{"target Pod failed", mig("m", "me", v1.MigrationPreparingTarget, t0), vmiWith(nil),
			pod(func(p *corev1.Pod) { bound(p); p.Status.Phase = corev1.PodFailed }),
			step{phase: v1.MigrationFailed, reason: ReasonTargetPodFailed, failState: true}},
		{"target Pod gone", mig("m", "me", v1.MigrationRunning, t0), vmiWith(nil), nil,
			step{phase: v1.MigrationFailed, reason: ReasonTargetPodVanished, failState: true}},
		{"VMI gone", mig("m", "me", v1.MigrationRunning, t0), nil, pod(runningPod),
			step{phase: v1.MigrationFailed, reason: ReasonVMINotFound, deleteTarget: true}},
		{"canceled while scheduling", deleted(mig("m", "me", v1.MigrationScheduling, t0)), runningVMI("True"), pod(nil),
			step{phase: v1.MigrationFailed, reason: ReasonAborted, failState: true, deleteTarget: true}},
		{"canceled while preparing", deleted(mig("m", "me", v1.MigrationPreparingTarget, t0)), vmiWith(nil), pod(runningPod),
			step{phase: v1.MigrationFailed, reason: ReasonAborted, failState: true, deleteTarget: true}},
		{"canceled when running", deleted(mig("m", "me", v1.MigrationRunning, t0)), vmiWith(nil), pod(runningPod),
			step{abort: true, reason: ReasonAbortRequested}},
		{"cancel asked, waiting", deleted(mig("m", "me", v1.MigrationRunning, t0)),
			vmiWith(func(ms *v1.VirtualMachineInstanceMigrationState) {
				ms.AbortRequested, ms.AbortStatus = true, v1.MigrationAbortInProgress
			}),
			pod(runningPod), step{}},
		{"cancel succeeded", deleted(mig("m", "me", v1.MigrationRunning, t0)),
			vmiWith(func(ms *v1.VirtualMachineInstanceMigrationState) {
				ms.AbortRequested, ms.AbortStatus, ms.Failed = true, v1.MigrationAbortSucceeded, true
			}), pod(runningPod), step{phase: v1.MigrationFailed, reason: ReasonAborted, deleteTarget: true}},
		{"cancel too late: completed anyway", deleted(mig("m", "me", v1.MigrationRunning, t0)),
			vmiWith(func(ms *v1.VirtualMachineInstanceMigrationState) {
				ms.AbortRequested, ms.AbortStatus = true, v1.MigrationAbortFailed
				ms.Completed, ms.TargetNodeDomainReadyTimestamp = true, &ts
			}), pod(runningPod), step{phase: v1.MigrationSucceeded, reason: ReasonMigrationSucceeded, handoff: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := progress(tc.m, tc.vmi, tc.target, now, to)
			got.msg = "" // the messages are for people
			if got != tc.want {
				t.Errorf("progress = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestSurplus(t *testing.T) {
	var all []*v1.VirtualMachineInstanceMigration
	for i := range 8 {
		all = append(all, mig(string(rune('a'+i)), types.UID(rune('a'+i)), v1.MigrationSucceeded, t0.Add(time.Duration(i)*time.Minute)))
	}
	all = append(all, mig("running", "r", v1.MigrationRunning, t0.Add(-time.Hour)))
	got := surplus(all, "vm", KeepFinished)
	var names []string
	for _, m := range got {
		names = append(names, m.Name)
	}
	if strings.Join(names, ",") != "c,b,a" {
		t.Errorf("surplus = %v, want the three oldest finished (c,b,a)", names)
	}
	if len(surplus(all[:5], "vm", KeepFinished)) != 0 {
		t.Error("five finished: none to delete")
	}
}

func TestTargetPodName(t *testing.T) {
	long := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("a", 60), UID: "vmi-uid"}}
	short := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "vm", UID: "vmi-uid"}}
	for _, vmi := range []*v1.VirtualMachineInstance{long, short} {
		a, b := launcherpod.MigrationTargetPodName(vmi, "m1"), launcherpod.MigrationTargetPodName(vmi, "m2")
		if a == b || a == launcherpod.PodName(vmi) || len(a) > launcherpod.MaxPodNameLength || a != launcherpod.MigrationTargetPodName(vmi, "m1") {
			t.Errorf("names %q %q (source %q)", a, b, launcherpod.PodName(vmi))
		}
	}
}
