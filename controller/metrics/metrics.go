// Package metrics holds the Prometheus registry of kemu's controllers: the
// VMI phase-transition histogram (KubeVirt's measure), the VMIs' phase
// count, client-go work-queue metrics for every queue, and the Go and
// process collectors.
package metrics

import (
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/util/workqueue"
)

// Registry holds every metric of the process.
var Registry = prometheus.NewRegistry()

// PhaseTransitionFromCreation observes, per phase a VMI enters, the seconds
// since the VMI's creation (KubeVirt's
// kubevirt_vmi_phase_transition_time_from_creation_seconds).
var PhaseTransitionFromCreation = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Name:    "kemu_vmi_phase_transition_time_from_creation_seconds",
	Help:    "Seconds from a VMI's creation to its entering a phase.",
	Buckets: []float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 90, 120, 180, 300, 600, 1200, 1800, 3600},
}, []string{"phase"})

// PodCreations counts launcher Pods created, by result (success, error).
var PodCreations = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "kemu_controller_launcher_pod_creations_total",
	Help: "Launcher Pods the VMI controller asked the API server to create, by result.",
}, []string{"result"})

// Work-queue metrics, labelled with the queue's name (component-base's names).
var (
	wqDepth = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Subsystem: "workqueue", Name: "depth", Help: "Current depth of the work queue.",
	}, []string{"name"})
	wqAdds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Subsystem: "workqueue", Name: "adds_total", Help: "Adds handled by the work queue.",
	}, []string{"name"})
	wqLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Subsystem: "workqueue", Name: "queue_duration_seconds",
		Help:    "Seconds an item stays in the work queue before being requested.",
		Buckets: prometheus.ExponentialBuckets(1e-6, 10, 10),
	}, []string{"name"})
	wqWorkDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Subsystem: "workqueue", Name: "work_duration_seconds",
		Help:    "Seconds processing an item from the work queue takes.",
		Buckets: prometheus.ExponentialBuckets(1e-6, 10, 10),
	}, []string{"name"})
	wqUnfinished = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Subsystem: "workqueue", Name: "unfinished_work_seconds",
		Help: "Seconds of work in progress not yet observed by work_duration.",
	}, []string{"name"})
	wqLongest = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Subsystem: "workqueue", Name: "longest_running_processor_seconds",
		Help: "Seconds the longest running processor of the work queue has been running.",
	}, []string{"name"})
	wqRetries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Subsystem: "workqueue", Name: "retries_total", Help: "Retries (rate-limited re-adds) handled by the work queue.",
	}, []string{"name"})
)

var once sync.Once

// Register registers every metric with Registry and installs the work-queue
// metrics provider. It must run before the first work queue is created and
// is idempotent.
func Register() {
	once.Do(func() {
		Registry.MustRegister(
			collectors.NewGoCollector(),
			collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
			PhaseTransitionFromCreation, PodCreations, VMIPhases,
			wqDepth, wqAdds, wqLatency, wqWorkDuration, wqUnfinished, wqLongest, wqRetries,
		)
		workqueue.SetProvider(provider{})
	})
}

// Handler serves Registry in the Prometheus text format.
func Handler() http.Handler {
	return promhttp.HandlerFor(Registry, promhttp.HandlerOpts{Registry: Registry})
}

type provider struct{}

func (provider) NewDepthMetric(name string) workqueue.GaugeMetric {
	return wqDepth.WithLabelValues(name)
}
func (provider) NewAddsMetric(name string) workqueue.CounterMetric {
	return wqAdds.WithLabelValues(name)
}
func (provider) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return wqLatency.WithLabelValues(name)
}
func (provider) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return wqWorkDuration.WithLabelValues(name)
}
func (provider) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return wqUnfinished.WithLabelValues(name)
}
func (provider) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return wqLongest.WithLabelValues(name)
}
func (provider) NewRetriesMetric(name string) workqueue.CounterMetric {
	return wqRetries.WithLabelValues(name)
}
