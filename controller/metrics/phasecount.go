package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"

	kemulisters "github.com/kemu-dev/kemu/api/client/listers/api/v1alpha1"
)

// PhaseCountName is the name of the VMIs' phase count.
const PhaseCountName = "kemu_vmi_phase_count"

var phaseCountDesc = prometheus.NewDesc(PhaseCountName,
	"VMIs in the cluster (the controller's namespace) by phase and node (empty: none yet).", []string{"phase", "node"}, nil)

// phaseCount is kemu_vmi_phase_count (KubeVirt's kubevirt_vmi_phase_count),
// counted over the VMI cache on each scrape: phases and nodes nobody is in
// have no series. Nothing is reported while no cache is set (a controller
// that is not the leader) or before it synced.
type phaseCount struct {
	src atomic.Pointer[phaseSource]
}

type phaseSource struct {
	lister kemulisters.VirtualMachineInstanceLister
	synced func() bool
}

// VMIPhases is the process's kemu_vmi_phase_count, registered by Register.
var VMIPhases = &phaseCount{}

// Set counts lister's VMIs from now on (once synced says so); the returned
// func stops it (the leader's term ended).
func (p *phaseCount) Set(lister kemulisters.VirtualMachineInstanceLister, synced func() bool) (unset func()) {
	s := &phaseSource{lister: lister, synced: synced}
	p.src.Store(s)
	return func() { p.src.CompareAndSwap(s, nil) }
}

// Describe implements prometheus.Collector.
func (p *phaseCount) Describe(ch chan<- *prometheus.Desc) { ch <- phaseCountDesc }

// Collect implements prometheus.Collector.
func (p *phaseCount) Collect(ch chan<- prometheus.Metric) {
	s := p.src.Load()
	if s == nil || !s.synced() {
		return
	}
	vmis, err := s.lister.List(labels.Everything())
	if err != nil {
		return
	}
	type key struct{ phase, node string }
	counts := map[key]int{}
	for _, v := range vmis {
		counts[key{string(v.Status.Phase), v.Status.NodeName}]++
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(phaseCountDesc, prometheus.GaugeValue, float64(n), k.phase, k.node)
	}
}
