//go:build qemu

package launcher

import (
	"context"
	"os/exec"
	"sort"
	"testing"
	"time"

	"github.com/kemu-dev/kemu/qmp"
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
// excluding the guest's boot), split into its phases, against the floor
// measured in the same loop: a bare qemu-system-x86_64 -S with the same
// command line (the same files prepared beforehand, untimed; the QMP socket
// inherited listening, as the launcher hands it) from exec to QMP greeting,
// capabilities, cont and status running. The image cache is warm after the
// first start, as on a node that ran the VM before. Run with -benchtime
// 10x: the medians are reported, and their ratio.
func BenchmarkStart(b *testing.B) {
	vmi := parseVMI(b, benchVMI)
	cfg := newConfig(b, vmi)
	phases := map[string][]time.Duration{}
	var totals, floors []time.Duration
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
		if f := bareQEMUStart(ctx, b, cfg); record {
			floors = append(floors, f)
		}
	}
	run(false) // fills the image cache
	b.ResetTimer()
	for b.Loop() {
		run(true)
	}
	b.StopTimer()
	b.ReportMetric(ms(median(totals)), "ms-total-median")
	b.ReportMetric(ms(median(floors)), "ms-bare-qemu-median")
	b.ReportMetric(float64(median(totals))/float64(median(floors)), "x-total/bare-qemu")
	for name, d := range phases {
		b.ReportMetric(ms(median(d)), "ms-"+name+"-median")
	}
}

// bareQEMUStart is the floor: the launcher prepares the VM (volumes,
// sockets, command line), untimed; then QEMU is started directly, as root,
// with that command line and the inherited QMP socket, and timed from exec
// to status running. Everything is removed afterwards.
func bareQEMUStart(ctx context.Context, b *testing.B, cfg Config) time.Duration {
	b.Helper()
	l, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	l.state = newDomainState(cfg.Accel)
	defer l.finish()
	if err := l.prepare(ctx, false); err != nil {
		b.Fatal(err)
	}
	bin := l.cfg.QEMU
	if bin == "" {
		bin = "qemu-system-x86_64"
	}
	cmd := exec.Command(bin, l.argv...)
	cmd.ExtraFiles = l.files
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	l.closeQMPListener()
	m, err := qmp.Dial(ctx, l.paths.QMP)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	if err := m.Cont(ctx); err != nil {
		b.Fatal(err)
	}
	st, err := m.QueryStatus(ctx)
	took := time.Since(t0)
	if err != nil || st.Status != "running" {
		b.Fatalf("bare QEMU: status %+v %v", st, err)
	}
	return took
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
