package apirate

import (
	"flag"
	"testing"

	"k8s.io/client-go/rest"
)

func TestLimits(t *testing.T) {
	for _, tc := range []struct {
		name      string
		args      []string
		qps       float32
		burst     int
		wantError bool
	}{
		{"defaults", nil, DefaultQPS, DefaultBurst, false},
		{"set", []string{"--kube-api-qps=5", "--kube-api-burst=10"}, 5, 10, false},
		{"zero qps", []string{"--kube-api-qps=0"}, 0, 0, true},
		{"zero burst", []string{"--kube-api-burst=0"}, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l Limits
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			l.Bind(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if err := l.Validate(); (err != nil) != tc.wantError {
				t.Fatalf("Validate: %v, want error %v", err, tc.wantError)
			}
			if tc.wantError {
				return
			}
			var cfg rest.Config
			l.Apply(&cfg)
			if cfg.QPS != tc.qps || cfg.Burst != tc.burst {
				t.Errorf("QPS %v burst %d, want %v %d", cfg.QPS, cfg.Burst, tc.qps, tc.burst)
			}
		})
	}
}
