package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	kemulisters "github.com/kemu-dev/kemu/api/client/listers/api/v1alpha1"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

func vmiIn(name string, phase v1.VirtualMachineInstancePhase, node string) *v1.VirtualMachineInstance {
	return &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Status: v1.VirtualMachineInstanceStatus{Phase: phase, NodeName: node}}
}

const phaseHeader = `# HELP kemu_vmi_phase_count VMIs in the cluster (the controller's namespace) by phase and node (empty: none yet).
# TYPE kemu_vmi_phase_count gauge
`

// kemu_vmi_phase_count counts the cache's VMIs by phase and node, and
// reports nothing without a synced cache.
func TestPhaseCount(t *testing.T) {
	for _, tc := range []struct {
		name   string
		vmis   []*v1.VirtualMachineInstance
		unset  bool
		synced bool
		want   string
	}{
		{name: "not the leader", unset: true, synced: true, vmis: []*v1.VirtualMachineInstance{vmiIn("a", v1.Running, "n1")}},
		{name: "not synced", vmis: []*v1.VirtualMachineInstance{vmiIn("a", v1.Running, "n1")}},
		{name: "none", synced: true},
		{name: "by phase and node", synced: true, vmis: []*v1.VirtualMachineInstance{
			vmiIn("a", v1.Running, "n1"), vmiIn("b", v1.Running, "n1"), vmiIn("c", v1.Running, "n2"),
			vmiIn("d", v1.Scheduling, ""), vmiIn("e", v1.VmPhaseUnset, ""), vmiIn("f", v1.Failed, "n2")},
			want: phaseHeader + `kemu_vmi_phase_count{node="",phase=""} 1
kemu_vmi_phase_count{node="",phase="Scheduling"} 1
kemu_vmi_phase_count{node="n1",phase="Running"} 2
kemu_vmi_phase_count{node="n2",phase="Failed"} 1
kemu_vmi_phase_count{node="n2",phase="Running"} 1
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			for _, v := range tc.vmis {
				if err := idx.Add(v); err != nil {
					t.Fatal(err)
				}
			}
			p := &phaseCount{}
			unset := p.Set(kemulisters.NewVirtualMachineInstanceLister(idx), func() bool { return tc.synced })
			if tc.unset {
				unset()
			}
			if err := testutil.CollectAndCompare(p, strings.NewReader(tc.want), "kemu_vmi_phase_count"); err != nil {
				t.Error(err)
			}
		})
	}
}

// An older term's unset does not stop a newer term's cache.
func TestPhaseCountUnsetOnlyItsOwn(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := idx.Add(vmiIn("a", v1.Running, "n1")); err != nil {
		t.Fatal(err)
	}
	p := &phaseCount{}
	old := p.Set(kemulisters.NewVirtualMachineInstanceLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})), func() bool { return true })
	p.Set(kemulisters.NewVirtualMachineInstanceLister(idx), func() bool { return true })
	old()
	if n := testutil.CollectAndCount(p, "kemu_vmi_phase_count"); n != 1 {
		t.Errorf("%d series after the old term's unset, want 1", n)
	}
}
