package metrics

import (
	"github.com/kemu-dev/kemu/nodeagent/vmi"
)

// Launchers is what the node agent's VMI controller knows of its current
// launchers (vmi.Controller.CurrentLaunchers).
type Launchers interface {
	CurrentLaunchers() []vmi.RunningLauncher
}

// TargetsOf turns the node agent's current launchers into targets.
func TargetsOf(l Launchers) func() []Target {
	return func() []Target {
		running := l.CurrentLaunchers()
		out := make([]Target, 0, len(running))
		for _, r := range running {
			out = append(out, targetOf(r))
		}
		return out
	}
}

func targetOf(r vmi.RunningLauncher) Target {
	v := r.VMI
	t := Target{Namespace: v.Namespace, Name: v.Name, UID: string(v.UID), Client: r.Client,
		Info: Info{Phase: string(v.Status.Phase), GuestOSName: v.Status.GuestOSInfo.Name, GuestOSVersionID: v.Status.GuestOSInfo.VersionID,
			GuestOSKernelRelease: v.Status.GuestOSInfo.KernelRelease, GuestOSMachine: v.Status.GuestOSInfo.Machine}}
	if m := v.Spec.Domain.Machine; m != nil {
		t.Info.MachineType = m.Type
	}
	return t
}
