package vmi

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Registry holds the node agent's metrics (served on /metrics by
// kemu-nodeagent), with the Go and process collectors.
var Registry = prometheus.NewRegistry()

var (
	reconciles = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kemu_nodeagent_vmi_reconciles_total",
		Help: "VMI reconciles of the node agent, by result (success, error).",
	}, []string{"result"})
	statusWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kemu_nodeagent_vmi_status_writes_total",
		Help: "VMI status writes of the node agent, by result (success, conflict, error).",
	}, []string{"result"})
	launcherConnections = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kemu_nodeagent_launcher_connections",
		Help: "Launchers the node agent is connected to.",
	})
	launcherConnects = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kemu_nodeagent_launcher_connects_total",
		Help: "Connections to launcher command servers, by result (success, error, unverified: refused, nothing sent).",
	}, []string{"result"})
	watchReconnects = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kemu_nodeagent_launcher_watch_reconnects_total",
		Help: "WatchDomain streams reopened (resuming from the last seq) after they broke.",
	})
	launcherRPCs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kemu_nodeagent_launcher_rpcs_total",
		Help: "Command-server RPCs the node agent made, by method and result (success, error).",
	}, []string{"method", "result"})
)

func init() {
	Registry.MustRegister(reconciles, statusWrites, launcherConnections, launcherConnects, watchReconnects, launcherRPCs,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
}

func countRPC(method string, err error) {
	r := "success"
	if err != nil {
		r = "error"
	}
	launcherRPCs.WithLabelValues(method, r).Inc()
}
