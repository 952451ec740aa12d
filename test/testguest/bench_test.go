//go:build qemu

package testguest

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkBootToReady measures QMP cont -> the guest's ready marker under
// TCG: the floor every kemu start latency sits on. One guest at a time.
func BenchmarkBootToReady(b *testing.B) {
	a := artifacts(b)
	cases := []struct {
		name string
		args func(dir string) []string
	}{
		{"direct-kernel", func(string) []string {
			return []string{"-kernel", a.Kernel, "-initrd", a.Initrd, "-append", "console=ttyS0 quiet kemu.dhcp=0"}
		}},
		{"disk-seabios", func(dir string) []string {
			o := overlay(b, a.Disk, filepath.Join(dir, "disk.qcow2"))
			return []string{"-blockdev", "driver=qcow2,node-name=root,file.driver=file,file.filename=" + o,
				"-device", "virtio-blk-pci,drive=root,bootindex=1"}
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var total time.Duration
			for b.Loop() {
				total += bootOnce(b, c.args)
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/ready")
		})
	}
}

// bootOnce boots a guest, returns cont -> ready, and stops QEMU before the
// next boot so guests never overlap.
func bootOnce(b *testing.B, args func(dir string) []string) time.Duration {
	b.Helper()
	dir := tempDir(b)
	vm := startVM(b, dir, false, args(dir)...)
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	if _, err := vm.w.Wait(ctx, IsKind(KindReady)); err != nil {
		b.Fatal(err)
	}
	d := time.Since(vm.started)
	_ = vm.cmd.Process.Kill()
	<-vm.exited
	return d
}
