package vmi

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// Role is what a launcher Pod on this node is to its VMI (KubeVirt: the
// VMI's active Pod; a migration's source and target Pods). Each entry of the
// node agent records its Pod's role.
type Role string

const (
	// RoleSource is the VMI's active launcher: its domain is the VMI's
	// status, its verification the LauncherUnverified condition, and it
	// alone gets Sync, the annotations' commands (pause, soft reboot) and
	// the shutdown. A VMI has at most one here (activeLauncher).
	RoleSource Role = "source"
	// RoleTarget is the target Pod of the VMI's current migration: labelled
	// kemu.dev/migration-uid with status.migrationState.migrationUid. It
	// gets PrepareMigrationTarget, its sockets are registered with the
	// proxy, and it writes the target's migrationState fields
	// (migration_target.go); its domain never reaches the VMI's phase.
	RoleTarget Role = "target"
	// RoleOther is any other launcher Pod of the VMI on this node (an
	// earlier migration's target, a leftover): it is connected, verified
	// and followed like the source, but sent nothing, and its domain (or
	// its loss) never reaches the VMI.
	RoleOther Role = "other"
)

// launcherRef is one launcher Pod of a VMI on this node: the Pod from the
// cache, or only its UID when status.activePods lists it for this node and
// the cache has no such Pod (yet, or any more).
type launcherRef struct {
	uid  types.UID
	pod  *corev1.Pod // nil: known from status.activePods only
	role Role
}

func (r launcherRef) name() string {
	if r.pod == nil {
		return ""
	}
	return r.pod.Name
}

// launcherRefs lists the VMI's launcher Pods on this node (its Pods in the
// cache, labelled kemu.dev/created-by=<vmi uid>, then the UIDs
// status.activePods records for this node that the cache lacks), each with
// its role: RoleSource for activeLauncher's choice, RoleOther for the rest.
func (c *Controller) launcherRefs(vmi *v1.VirtualMachineInstance) []launcherRef {
	pods, _ := c.podLister.Pods(vmi.Namespace).List(labels.SelectorFromSet(labels.Set{launcherpod.CreatedByLabel: string(vmi.UID)}))
	var refs []launcherRef
	for _, p := range pods {
		if p.Spec.NodeName == c.cfg.NodeName {
			refs = append(refs, launcherRef{uid: p.UID, pod: p})
		}
	}
	var listed []launcherRef
	for uid, node := range vmi.Status.ActivePods {
		if node == c.cfg.NodeName && !slices.ContainsFunc(refs, func(r launcherRef) bool { return r.uid == uid }) {
			listed = append(listed, launcherRef{uid: uid})
		}
	}
	slices.SortFunc(listed, func(a, b launcherRef) int { return strings.Compare(string(a.uid), string(b.uid)) })
	refs = append(refs, listed...)
	source := activeLauncher(vmi, refs)
	for i := range refs {
		refs[i].role = launcherRole(vmi, refs[i], source)
	}
	return refs
}

// launcherRole is a launcher Pod's role: the source (activeLauncher's
// choice), the target of the VMI's current migration, or other.
func launcherRole(vmi *v1.VirtualMachineInstance, r launcherRef, source types.UID) Role {
	switch ms := vmi.Status.MigrationState; {
	case r.uid == source:
		return RoleSource
	case r.pod != nil && ms != nil && ms.MigrationUID != "" && r.pod.Labels[launcherpod.MigrationUIDLabel] == string(ms.MigrationUID):
		return RoleTarget
	}
	return RoleOther
}

// migrationPod says whether a Pod was made as a migration's target
// (labelled kemu.dev/migration-uid) and is not the source of the VMI's
// current migration: such a Pod is the VMI's launcher only once a handoff
// names it (status.launcherPod), and stays its launcher (the source) for a
// later migration; a failed migration's target never is.
func migrationPod(vmi *v1.VirtualMachineInstance, p *corev1.Pod) bool {
	if _, ok := p.Labels[launcherpod.MigrationUIDLabel]; !ok {
		return false
	}
	ms := vmi.Status.MigrationState
	return ms == nil || ms.SourcePod != p.Name
}

// activeLauncher decides which of the VMI's launcher Pods here writes the
// VMI's status: the Pod status.launcherPod names; else the newest of its
// Pods in the cache that is no migration's target (the only one, but for
// leftovers); else, with no Pod in the cache, the first UID
// status.activePods lists for this node. "" when the VMI has no launcher
// here. A migration's target Pod becomes the source only once the
// controller names it in status.launcherPod (the handoff).
func activeLauncher(vmi *v1.VirtualMachineInstance, refs []launcherRef) types.UID {
	var newest *corev1.Pod
	for _, r := range refs {
		switch {
		case r.pod == nil:
		case r.pod.Name == vmi.Status.LauncherPod:
			return r.uid
		case migrationPod(vmi, r.pod):
		case newest == nil || r.pod.CreationTimestamp.After(newest.CreationTimestamp.Time):
			newest = r.pod
		}
	}
	if newest != nil {
		return newest.UID
	}
	for _, r := range refs {
		if r.pod == nil {
			return r.uid // activePods' UIDs, sorted
		}
	}
	return ""
}

// entries returns the states of the VMI's launcher Pods (refs), making the
// missing ones and closing those of the VMI's Pods no longer there (a
// deleted Pod: its connection and goroutines end, nothing is sent to it)
// and those of an earlier VMI of the same name. Each entry gets its ref's
// role.
func (c *Controller) entries(key string, vmiUID types.UID, refs []launcherRef) []*launcherState {
	c.mu.Lock()
	var out, stale []*launcherState
	for _, r := range refs {
		st := c.launchers[r.uid]
		if st == nil || st.key != key || st.vmiUID != vmiUID {
			if st != nil {
				stale = append(stale, st)
			}
			st = &launcherState{podUID: r.uid, key: key, vmiUID: vmiUID}
			c.launchers[r.uid] = st
		}
		if r.pod != nil && st.podName != r.pod.Name {
			st.podName = r.pod.Name
		}
		st.role = r.role
		out = append(out, st)
	}
	for uid, st := range c.launchers {
		if st.key == key && !slices.Contains(out, st) {
			stale = append(stale, st)
			delete(c.launchers, uid)
		}
	}
	c.mu.Unlock()
	for _, st := range stale {
		st.close()
	}
	return out
}

// replace closes a launcher's entry and puts a fresh one (same Pod, VMI
// and role) in its place.
func (c *Controller) replace(st *launcherState) *launcherState {
	fresh := &launcherState{podUID: st.podUID, podName: st.podName, key: st.key, vmiUID: st.vmiUID, role: st.role}
	c.mu.Lock()
	if c.launchers[st.podUID] == st {
		c.launchers[st.podUID] = fresh
	}
	c.mu.Unlock()
	st.close()
	return fresh
}

// drop forgets the entries of a VMI's launchers and closes their
// connections (the VMs keep running).
func (c *Controller) drop(key string) {
	c.entries(key, "", nil)
}

// closeAll closes every entry (Run is ending).
func (c *Controller) closeAll() {
	c.mu.Lock()
	all := c.launchers
	c.launchers = map[types.UID]*launcherState{}
	c.mu.Unlock()
	for _, st := range all {
		st.close()
	}
}

// entry returns an entry of the VMI key with that role (nil: none).
func (c *Controller) entry(key string, role Role) *launcherState {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.launchers {
		if st.key == key && st.role == role {
			return st
		}
	}
	return nil
}
