//go:build qemu

package launcher

import (
	"context"
	"sort"
	"testing"
	"time"
)

const benchVMI = `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: bench}
spec:
  domain:
    memory: {guest: 256Mi}
    devices:
      autoattachPodInterface: false
      disks: [{name: root, bootOrder: 1, disk: {bus: virtio}}]
  volumes:
  - {name: root, containerDisk: {image: "oci:_out/testguest/oci/containerdisk"}}
`

// BenchmarkStart measures Start (launcher work → QEMU status running,
// excluding the guest's boot), split into its phases; the image cache is
// warm after the first start, as on a node that ran the VM before.
// Run with -benchtime 10x: the medians are reported.
func BenchmarkStart(b *testing.B) {
	vmi := parseVMI(b, benchVMI)
	cfg := newConfig(b, vmi)
	phases := map[string][]time.Duration{}
	var totals []time.Duration
	run := func(record bool) {
		l, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
		defer cancel()
		t0 := time.Now()
		if err := l.Start(ctx); err != nil {
			b.Fatal(err)
		}
		st, err := l.Monitor().QueryStatus(ctx)
		total := time.Since(t0)
		if err != nil || st.Status != "running" {
			b.Fatalf("status %+v %v", st, err)
		}
		if record {
			totals = append(totals, total)
			for _, p := range l.Phases {
				phases[p.Name] = append(phases[p.Name], p.Took)
			}
		}
		if _, err := l.Kill(ctx); err != nil {
			b.Fatal(err)
		}
	}
	run(false) // fills the image cache
	b.ResetTimer()
	for b.Loop() {
		run(true)
	}
	b.StopTimer()
	b.ReportMetric(ms(median(totals)), "ms-total-median")
	for name, d := range phases {
		b.ReportMetric(ms(median(d)), "ms-"+name+"-median")
	}
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
