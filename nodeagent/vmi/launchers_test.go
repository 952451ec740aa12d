package vmi

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// Which of a VMI's launcher Pods are entries on node n1, and which one is
// the source (its domain writes the VMI's status).
func TestLauncherRefs(t *testing.T) {
	t0 := time.Unix(1000, 0)
	pod := func(name, uid, node, vmiUID string, age time.Duration) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid),
			CreationTimestamp: metav1.NewTime(t0.Add(-age)), Labels: map[string]string{launcherpod.CreatedByLabel: vmiUID}},
			Spec: corev1.PodSpec{NodeName: node}}
	}
	type want struct {
		uid  types.UID
		name string
		role Role
	}
	target := func(name, uid, node, migration string, age time.Duration) *corev1.Pod {
		p := pod(name, uid, node, "vmi", age)
		p.Labels[launcherpod.MigrationUIDLabel] = migration
		return p
	}
	for _, tc := range []struct {
		name         string
		pods         []*corev1.Pod
		launcherPod  string
		activePods   map[types.UID]string
		migrationUID string
		sourcePod    string
		want         []want // in any order
		noSource     bool
	}{
		{name: "a migration's target beside its source: the newer Pod is the target, not the source", launcherPod: "src", migrationUID: "m1",
			pods: []*corev1.Pod{pod("src", "u-src", "n1", "vmi", time.Hour), target("tgt", "u-tgt", "n1", "m1", 0)},
			want: []want{{"u-src", "src", RoleSource}, {"u-tgt", "tgt", RoleTarget}}},
		{name: "source unnamed: the target Pod is never the newest", migrationUID: "m1",
			pods: []*corev1.Pod{pod("src", "u-src", "n1", "vmi", time.Hour), target("tgt", "u-tgt", "n1", "m1", 0)},
			want: []want{{"u-src", "src", RoleSource}, {"u-tgt", "tgt", RoleTarget}}},
		{name: "only the target here (the source on another node)", launcherPod: "src", migrationUID: "m1",
			pods: []*corev1.Pod{pod("src", "u-src", "n2", "vmi", time.Hour), target("tgt", "u-tgt", "n1", "m1", 0)},
			want: []want{{"u-tgt", "tgt", RoleTarget}}, noSource: true},
		{name: "an earlier migration's target is other", migrationUID: "m2",
			pods: []*corev1.Pod{target("old", "u-old", "n1", "m1", 0)},
			want: []want{{"u-old", "old", RoleOther}}, noSource: true},
		{name: "a migrated-to Pod is the source of the next migration", launcherPod: "new", migrationUID: "m2", sourcePod: "old",
			pods: []*corev1.Pod{target("old", "u-old", "n1", "m1", 0)},
			want: []want{{"u-old", "old", RoleSource}}},
		{name: "after the handoff the target Pod is the source", launcherPod: "tgt", migrationUID: "m1",
			pods: []*corev1.Pod{target("tgt", "u-tgt", "n1", "m1", 0)},
			want: []want{{"u-tgt", "tgt", RoleSource}}},
		{name: "no Pod", want: nil},
		{name: "the only Pod", pods: []*corev1.Pod{pod("a", "ua", "n1", "vmi", 0)},
			want: []want{{"ua", "a", RoleSource}}},
		{name: "two Pods: the one status.launcherPod names is the source", launcherPod: "old",
			pods: []*corev1.Pod{pod("old", "u-old", "n1", "vmi", time.Hour), pod("new", "u-new", "n1", "vmi", 0)},
			want: []want{{"u-old", "old", RoleSource}, {"u-new", "new", RoleOther}}},
		{name: "two Pods, none named: the newest", pods: []*corev1.Pod{pod("old", "u-old", "n1", "vmi", time.Hour), pod("new", "u-new", "n1", "vmi", 0)},
			want: []want{{"u-old", "old", RoleOther}, {"u-new", "new", RoleSource}}},
		{name: "the named Pod runs on another node", launcherPod: "there",
			pods: []*corev1.Pod{pod("there", "u-there", "n2", "vmi", 0), pod("here", "u-here", "n1", "vmi", time.Hour)},
			want: []want{{"u-here", "here", RoleSource}}},
		{name: "another VMI's Pod is none of ours", pods: []*corev1.Pod{pod("a", "ua", "n1", "other-vmi", 0)}, want: nil},
		{name: "not in the cache: activePods' UIDs for this node, the first sorted the source",
			activePods: map[types.UID]string{"u2": "n1", "u1": "n1", "u3": "n2"},
			want:       []want{{"u1", "", RoleSource}, {"u2", "", RoleOther}}},
		{name: "a cached Pod wins over activePods' UIDs", pods: []*corev1.Pod{pod("a", "ua", "n1", "vmi", 0)},
			activePods: map[types.UID]string{"ua": "n1", "u-gone": "n1"},
			want:       []want{{"ua", "a", RoleSource}, {"u-gone", "", RoleOther}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
			for _, p := range tc.pods {
				if err := idx.Add(p); err != nil {
					t.Fatal(err)
				}
			}
			c := &Controller{cfg: Config{NodeName: "n1"}, podLister: corelisters.NewPodLister(idx)}
			vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm", UID: "vmi"},
				Status: v1.VirtualMachineInstanceStatus{LauncherPod: tc.launcherPod, ActivePods: tc.activePods}}
			if tc.migrationUID != "" {
				vmi.Status.MigrationState = &v1.VirtualMachineInstanceMigrationState{MigrationUID: types.UID(tc.migrationUID), SourcePod: tc.sourcePod}
			}
			got := map[types.UID]want{}
			sources := 0
			for _, r := range c.launcherRefs(vmi) {
				got[r.uid] = want{r.uid, r.name(), r.role}
				if r.role == RoleSource {
					sources++
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("refs %v, want %v", got, tc.want)
			}
			for _, w := range tc.want {
				if got[w.uid] != w {
					t.Errorf("ref %s = %+v, want %+v", w.uid, got[w.uid], w)
				}
			}
			if tc.noSource && sources != 0 {
				t.Errorf("%d sources, want none", sources)
			}
			if len(tc.want) > 0 && !tc.noSource && sources != 1 {
				t.Errorf("%d sources, want 1", sources)
			}
		})
	}
}

// entries keeps one entry per launcher Pod: a Pod's entry survives a
// sync, a Pod no longer listed loses its entry, another VMI's entries are
// untouched, and a VMI of the same name with a new UID starts afresh.
func TestEntries(t *testing.T) {
	c := &Controller{launchers: map[types.UID]*launcherState{}}
	refs := func(uids ...types.UID) []launcherRef {
		var out []launcherRef
		for i, u := range uids {
			r := launcherRef{uid: u, role: RoleOther}
			if i == 0 {
				r.role = RoleSource
			}
			out = append(out, r)
		}
		return out
	}
	a := c.entries("ns/a", "vmi-a", refs("p1", "p2"))
	other := c.entries("ns/b", "vmi-b", refs("p9"))
	if len(a) != 2 || a[0].podUID != "p1" || a[0].role != RoleSource || a[1].podUID != "p2" || a[1].role != RoleOther || len(c.launchers) != 3 {
		t.Fatalf("entries %+v, %d in all", a, len(c.launchers))
	}
	again := c.entries("ns/a", "vmi-a", refs("p1", "p2"))
	if again[0] != a[0] || again[1] != a[1] {
		t.Error("a sync replaced existing entries")
	}
	// p2's Pod is gone.
	after := c.entries("ns/a", "vmi-a", refs("p1"))
	if len(after) != 1 || after[0] != a[0] || c.launchers["p2"] != nil {
		t.Errorf("p2's entry kept: %+v", c.launchers)
	}
	if c.launchers["p9"] != other[0] {
		t.Error("another VMI's entry touched")
	}
	// The VMI was deleted and made again with the same name.
	renewed := c.entries("ns/a", "vmi-a2", refs("p1"))
	if renewed[0] == a[0] || renewed[0].vmiUID != "vmi-a2" {
		t.Error("the new VMI reuses the old one's entry")
	}
	if c.entry("ns/a", RoleSource) != renewed[0] || c.entry("ns/a", RoleOther) != nil {
		t.Error("entry() does not find the source")
	}
	c.drop("ns/a")
	if len(c.launchers) != 1 || c.launchers["p9"] == nil {
		t.Errorf("drop left %+v", c.launchers)
	}
}
