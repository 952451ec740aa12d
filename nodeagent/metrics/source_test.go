package metrics

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/launcher/rpc"
	"github.com/kemu-dev/kemu/nodeagent/vmi"
)

// fullClient is a launcher client of the node agent's type; targetOf
// calls nothing on it.
type fullClient struct{ rpc.LauncherClient }

type launchersFunc func() []vmi.RunningLauncher

func (f launchersFunc) CurrentLaunchers() []vmi.RunningLauncher { return f() }

// The node agent's current launchers become targets: the VMI's identity,
// phase, machine type and guest OS, the launcher's client.
func TestTargetsOf(t *testing.T) {
	client := &fullClient{}
	withMachine := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "u-a"},
		Spec: v1.VirtualMachineInstanceSpec{Domain: v1.DomainSpec{Machine: &v1.Machine{Type: "q35"}}},
		Status: v1.VirtualMachineInstanceStatus{Phase: v1.Running, GuestOSInfo: v1.VirtualMachineInstanceGuestOSInfo{
			Name: "Debian GNU/Linux", VersionID: "13", KernelRelease: "6.12.0", Machine: "x86_64"}}}
	bare := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b", UID: "u-b"}}
	for _, tc := range []struct {
		name string
		in   []vmi.RunningLauncher
		want []Target
	}{
		{name: "none", want: []Target{}},
		{name: "two", in: []vmi.RunningLauncher{
			{APILauncher: vmi.APILauncher{Client: client}, VMI: withMachine},
			{APILauncher: vmi.APILauncher{Client: client}, VMI: bare}},
			want: []Target{
				{Namespace: "ns", Name: "a", UID: "u-a", Client: client, Info: Info{Phase: "Running", MachineType: "q35",
					GuestOSName: "Debian GNU/Linux", GuestOSVersionID: "13", GuestOSKernelRelease: "6.12.0", GuestOSMachine: "x86_64"}},
				{Namespace: "ns", Name: "b", UID: "u-b", Client: client}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := TargetsOf(launchersFunc(func() []vmi.RunningLauncher { return tc.in }))()
			if len(got) != len(tc.want) {
				t.Fatalf("%d targets, want %d", len(got), len(tc.want))
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("target %d = %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}
