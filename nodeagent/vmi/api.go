package vmi

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/launcher/rpc"
)

// APILauncher is what the node agent's API (nodeagent/nodeapi) may use of
// a VMI's current launcher on this node: the VMI's UID, the verified
// launcher's client, and a context that ends when this launcher's entry
// ends (the Pod deleted, the VMI dropped or handed over, the node agent
// stopping).
type APILauncher struct {
	VMIUID types.UID
	Client rpc.LauncherClient
	// Ctx ends with the launcher's entry.
	Ctx context.Context
	// State is the domain's last state (DOMAIN_STATE_UNSPECIFIED before
	// the first).
	State rpc.DomainState
	// AgentConnected is the domain's agent_connected.
	AgentConnected bool
}

// CurrentLauncher returns the current launcher (the source role) of VMI
// namespace/name on this node, once connected and verified; false when
// the VMI has none here.
func (c *Controller) CurrentLauncher(namespace, name string) (APILauncher, bool) {
	key := namespace + "/" + name
	st := c.entry(key, RoleSource)
	if st == nil {
		return APILauncher{}, false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.client == nil || st.ctx.Err() != nil || st.gone != "" {
		return APILauncher{}, false
	}
	return APILauncher{VMIUID: st.vmiUID, Client: st.client, Ctx: st.ctx, State: st.domain.GetState(),
		AgentConnected: st.domain.GetAgentConnected()}, true
}

// RunningLauncher is a VMI's current launcher on this node with what the
// node agent knows of it, for the node's VMI metrics (nodeagent/metrics).
type RunningLauncher struct {
	APILauncher
	// VMI is the cached object: read only.
	VMI *v1.VirtualMachineInstance
}

// CurrentLaunchers lists the current launcher (the source role) of each
// VMI on this node that is connected and verified and still in the cache.
func (c *Controller) CurrentLaunchers() []RunningLauncher {
	c.mu.Lock()
	var sources []*launcherState
	for _, st := range c.launchers {
		if st.role == RoleSource {
			sources = append(sources, st)
		}
	}
	c.mu.Unlock()
	var out []RunningLauncher
	for _, st := range sources {
		ns, name, err := cache.SplitMetaNamespaceKey(st.key)
		if err != nil {
			continue
		}
		vmi, err := c.vmiLister.VirtualMachineInstances(ns).Get(name)
		if err != nil || vmi.UID != st.vmiUID {
			continue
		}
		st.mu.Lock()
		if st.client != nil && st.ctx.Err() == nil && st.gone == "" {
			out = append(out, RunningLauncher{
				APILauncher: APILauncher{VMIUID: st.vmiUID, Client: st.client, Ctx: st.ctx, State: st.domain.GetState(),
					AgentConnected: st.domain.GetAgentConnected()},
				VMI: vmi})
		}
		st.mu.Unlock()
	}
	return out
}
