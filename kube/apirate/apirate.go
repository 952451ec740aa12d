// Package apirate is the client-side rate limit of kemu's controller and
// node agent towards kube-apiserver: one pair of flags with the kubelet's
// defaults (kubeAPIQPS 50, kubeAPIBurst 100). client-go's own default, 5
// requests per second with a burst of 10, made a node agent's status writes
// wait behind each other when ten VMIs started at once (docs/benchmarks.md).
package apirate

import (
	"flag"
	"fmt"

	"k8s.io/client-go/rest"
)

// The defaults: the kubelet's.
const (
	DefaultQPS   = 50
	DefaultBurst = 100
)

// Limits are requests per second and the burst above them.
type Limits struct {
	QPS   float64
	Burst int
}

// Bind registers --kube-api-qps and --kube-api-burst with the defaults.
func (l *Limits) Bind(fs *flag.FlagSet) {
	fs.Float64Var(&l.QPS, "kube-api-qps", DefaultQPS, "API requests per second")
	fs.IntVar(&l.Burst, "kube-api-burst", DefaultBurst, "API request burst")
}

// Validate refuses limits client-go would replace by its own defaults.
func (l Limits) Validate() error {
	if l.QPS <= 0 || l.Burst < 1 {
		return fmt.Errorf("--kube-api-qps %v and --kube-api-burst %d: both must be positive", l.QPS, l.Burst)
	}
	return nil
}

// Apply sets the limits on cfg.
func (l Limits) Apply(cfg *rest.Config) {
	cfg.QPS, cfg.Burst = float32(l.QPS), l.Burst
}
