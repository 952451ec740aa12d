package vmi

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/types"

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
