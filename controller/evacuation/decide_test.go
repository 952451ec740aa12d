package evacuation

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

func vmiWith(s v1.EvictionStrategy, phase v1.VirtualMachineInstancePhase, migratable bool) *v1.VirtualMachineInstance {
	vmi := &v1.VirtualMachineInstance{Status: v1.VirtualMachineInstanceStatus{Phase: phase, NodeName: "a"}}
	if s != "" {
		vmi.Spec.EvictionStrategy = &s
	}
	st := corev1.ConditionFalse
	if migratable {
		st = corev1.ConditionTrue
	}
	vmi.Status.Conditions = []v1.VirtualMachineInstanceCondition{{Type: v1.VirtualMachineInstanceIsMigratable, Status: st}}
	return vmi
}

func TestBudget(t *testing.T) {
	migrating := vmiWith(v1.EvictionStrategyLiveMigrate, v1.Running, true)
	migrating.Status.MigrationState = &v1.VirtualMachineInstanceMigrationState{TargetPod: "t"}
	done := vmiWith(v1.EvictionStrategyLiveMigrate, v1.Running, true)
	done.Status.MigrationState = &v1.VirtualMachineInstanceMigrationState{TargetPod: "t", Completed: true}
	deleted := vmiWith(v1.EvictionStrategyLiveMigrate, v1.Running, true)
	deleted.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	for name, tc := range map[string]struct {
		vmi  *v1.VirtualMachineInstance
		want int32
	}{
		"none (default)":                        {vmiWith("", v1.Running, true), 0},
		"None":                                  {vmiWith(v1.EvictionStrategyNone, v1.Running, true), 0},
		"LiveMigrate":                           {vmiWith(v1.EvictionStrategyLiveMigrate, v1.Running, false), 1},
		"LiveMigrate, scheduling":               {vmiWith(v1.EvictionStrategyLiveMigrate, v1.Scheduling, false), 1},
		"External":                              {vmiWith(v1.EvictionStrategyExternal, v1.Running, false), 1},
		"LiveMigrateIfPossible, migratable":     {vmiWith(v1.EvictionStrategyLiveMigrateIfPossible, v1.Running, true), 1},
		"LiveMigrateIfPossible, not migratable": {vmiWith(v1.EvictionStrategyLiveMigrateIfPossible, v1.Running, false), 0},
		"migrating: source and target":          {migrating, 2},
		"migration completed":                   {done, 1},
		"final":                                 {vmiWith(v1.EvictionStrategyLiveMigrate, v1.Succeeded, true), 0},
		"deleted":                               {deleted, 0},
	} {
		if got := budget(tc.vmi); got != tc.want {
			t.Errorf("%s: budget = %d, want %d", name, got, tc.want)
		}
	}
}

func TestDecide(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	cordonedNode := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: corev1.NodeSpec{Unschedulable: true}}
	tainted := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}}}}
	open := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
	other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "b"}, Spec: corev1.NodeSpec{Unschedulable: true}}
	live := vmiWith(v1.EvictionStrategyLiveMigrate, v1.Running, true)
	for name, tc := range map[string]struct {
		vmi  *v1.VirtualMachineInstance
		node *corev1.Node
		m    migrations
		want plan
	}{
		"cordoned: migrate":                 {live, cordonedNode, migrations{}, plan{evacuationNode: "a", migrate: true}},
		"unschedulable taint: migrate":      {live, tainted, migrations{}, plan{evacuationNode: "a", migrate: true}},
		"already migrating":                 {live, cordonedNode, migrations{active: true}, plan{evacuationNode: "a"}},
		"failed 20 s ago: wait":             {live, cordonedNode, migrations{lastFailed: now.Add(-20 * time.Second)}, plan{evacuationNode: "a", retryIn: 40 * time.Second}},
		"failed 2 min ago: again":           {live, cordonedNode, migrations{lastFailed: now.Add(-2 * time.Minute)}, plan{evacuationNode: "a", migrate: true}},
		"External: marked only":             {vmiWith(v1.EvictionStrategyExternal, v1.Running, true), cordonedNode, migrations{}, plan{evacuationNode: "a"}},
		"None: left to the drain":           {vmiWith(v1.EvictionStrategyNone, v1.Running, true), cordonedNode, migrations{}, plan{}},
		"IfPossible, not migratable: drain": {vmiWith(v1.EvictionStrategyLiveMigrateIfPossible, v1.Running, false), cordonedNode, migrations{}, plan{}},
		"IfPossible, migratable: migrate":   {vmiWith(v1.EvictionStrategyLiveMigrateIfPossible, v1.Running, true), cordonedNode, migrations{}, plan{evacuationNode: "a", migrate: true}},
		"node open: nothing (mark cleared)": {live, open, migrations{}, plan{}},
		"VMI on another node: mark cleared": {live, other, migrations{}, plan{}},
		"node gone: nothing":                {live, nil, migrations{}, plan{}},
		"not running":                       {vmiWith(v1.EvictionStrategyLiveMigrate, v1.Scheduled, true), cordonedNode, migrations{}, plan{}},
	} {
		if got := decide(tc.vmi, tc.node, tc.m, now, time.Minute); got != tc.want {
			t.Errorf("%s: decide = %+v, want %+v", name, got, tc.want)
		}
	}
}
