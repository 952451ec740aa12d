package vmi

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	kemulisters "github.com/kemu-dev/kemu/api/client/listers/api/v1alpha1"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/launcher/rpc"
	"github.com/kemu-dev/kemu/nodeagent/launcherclient"
)

// CurrentLauncher answers only the VMI's source launcher, once connected,
// while its entry lives and the launcher is not gone.
func TestCurrentLauncher(t *testing.T) {
	c := &Controller{launchers: map[types.UID]*launcherState{}}
	if _, ok := c.CurrentLauncher("ns", "a"); ok {
		t.Error("a VMI with no entry has a launcher")
	}
	sts := c.entries("ns/a", "vmi-a", []launcherRef{{uid: "target", role: RoleTarget}, {uid: "source", role: RoleSource}})
	target, source := sts[0], sts[1]
	if _, ok := c.CurrentLauncher("ns", "a"); ok {
		t.Error("an unconnected source is the current launcher")
	}
	connect := func(st *launcherState) context.CancelFunc {
		ctx, cancel := context.WithCancel(context.Background())
		st.ctx, st.cancel, st.client = ctx, cancel, &launcherclient.Client{}
		return cancel
	}
	defer connect(target)()
	if _, ok := c.CurrentLauncher("ns", "a"); ok {
		t.Error("a migration's target is the current launcher")
	}
	cancel := connect(source)
	source.setDomain(&rpc.Domain{Seq: 1, State: rpc.DomainState_Running, AgentConnected: true})
	l, ok := c.CurrentLauncher("ns", "a")
	if !ok || l.VMIUID != "vmi-a" || l.Client != source.client || l.State != rpc.DomainState_Running || !l.AgentConnected || l.Ctx != source.ctx {
		t.Errorf("current launcher %+v, %v", l, ok)
	}
	if _, ok := c.CurrentLauncher("ns", "b"); ok {
		t.Error("another VMI's name finds a launcher")
	}
	source.setGone("the launcher's socket is gone")
	if _, ok := c.CurrentLauncher("ns", "a"); ok {
		t.Error("a gone launcher is current")
	}
	source.gone = ""
	cancel()
	if _, ok := c.CurrentLauncher("ns", "a"); ok {
		t.Error("a closed entry is current")
	}
}

// CurrentLaunchers lists the connected source launcher of each VMI still
// in the cache under the entry's UID, with the cached VMI.
func TestCurrentLaunchers(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, v := range []*v1.VirtualMachineInstance{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "vmi-a"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b", UID: "vmi-b-new"}}, // b was created again
	} {
		if err := idx.Add(v); err != nil {
			t.Fatal(err)
		}
	}
	c := &Controller{launchers: map[types.UID]*launcherState{}, vmiLister: kemulisters.NewVirtualMachineInstanceLister(idx)}
	connect := func(st *launcherState) {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		st.ctx, st.cancel, st.client = ctx, cancel, &launcherclient.Client{}
	}
	a := c.entries("ns/a", "vmi-a", []launcherRef{{uid: "a-target", role: RoleTarget}, {uid: "a-source", role: RoleSource}})
	b := c.entries("ns/b", "vmi-b-old", []launcherRef{{uid: "b-source", role: RoleSource}})
	gone := c.entries("ns/gone", "vmi-gone", []launcherRef{{uid: "gone-source", role: RoleSource}})
	if got := c.CurrentLaunchers(); len(got) != 0 {
		t.Errorf("unconnected launchers listed: %+v", got)
	}
	for _, st := range []*launcherState{a[0], a[1], b[0], gone[0]} {
		connect(st)
	}
	a[1].setDomain(&rpc.Domain{Seq: 1, State: rpc.DomainState_Running})
	got := c.CurrentLaunchers()
	if len(got) != 1 || got[0].VMI.Name != "a" || got[0].VMIUID != "vmi-a" || got[0].Client != a[1].client || got[0].State != rpc.DomainState_Running {
		t.Fatalf("current launchers %+v, want only a's source", got)
	}
	a[1].setGone("the launcher's socket is gone")
	if got := c.CurrentLaunchers(); len(got) != 0 {
		t.Errorf("a gone launcher listed: %+v", got)
	}
}
