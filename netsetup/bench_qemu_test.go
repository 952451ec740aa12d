//go:build qemu

package netsetup

import (
	"context"
	"testing"
	"time"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// BenchmarkSetupTeardown measures Setup (links, nftables, taps, DHCP
// server) and Teardown of one interface in a fresh pod namespace:
//
//	go test -run x -bench . -tags qemu ./netsetup/
func BenchmarkSetupTeardown(b *testing.B) {
	for _, tc := range []struct {
		name string
		mut  func(*v1.VirtualMachineInstance)
		opts Options
	}{
		{name: "masquerade"},
		{name: "masquerade-ports", mut: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Interfaces[0].Ports = []v1.Port{{Port: 22}, {Port: 80}, {Port: 443}}
		}},
		{name: "masquerade-4queues", opts: Options{Multiqueue: ptr(true)}, mut: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.CPU.Cores = 4
		}},
		{name: "bridge", mut: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Interfaces[0].Masquerade = nil
			vmi.Spec.Domain.Devices.Interfaces[0].Bridge = &v1.InterfaceBridge{}
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			e := newPodEnv(b)
			p := e.plan(b, tc.mut, tc.opts)
			ctx := context.Background()
			var setup, teardown time.Duration
			for b.Loop() {
				t0 := time.Now()
				r, err := Setup(ctx, p)
				if err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if err := r.Teardown(ctx); err != nil {
					b.Fatal(err)
				}
				setup += t1.Sub(t0)
				teardown += time.Since(t1)
			}
			b.ReportMetric(float64(setup.Microseconds())/float64(b.N), "setup-µs/op")
			b.ReportMetric(float64(teardown.Microseconds())/float64(b.N), "teardown-µs/op")
		})
	}
}
