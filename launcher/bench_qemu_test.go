//go:build qemu

package launcher

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
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

// BenchmarkLauncherRSS measures the memory of the launcher process (kemuctl
// run: launcher, QMP client, console pump), not QEMU's, with one running VM.
func BenchmarkLauncherRSS(b *testing.B) {
	root := repoRoot(b)
	bin := filepath.Join(b.TempDir(), "kemuctl")
	if out, err := exec.Command("go", "build", "-o", bin, filepath.Join(root, "cmd", "kemuctl")).CombinedOutput(); err != nil {
		b.Fatalf("build kemuctl: %v\n%s", err, out)
	}
	var launcherKiB, qemuKiB []int
	for b.Loop() {
		l, q := launcherRSSOnce(b, root, bin)
		launcherKiB, qemuKiB = append(launcherKiB, l), append(qemuKiB, q)
	}
	sort.Ints(launcherKiB)
	sort.Ints(qemuKiB)
	b.ReportMetric(float64(launcherKiB[len(launcherKiB)/2])/1024, "MiB-launcher-RSS")
	b.ReportMetric(float64(qemuKiB[len(qemuKiB)/2])/1024, "MiB-QEMU-RSS")
}

func launcherRSSOnce(b *testing.B, root, bin string) (int, int) {
	dir := shortDir(b)
	vmiFile := filepath.Join(dir, "vmi.yaml")
	if err := os.WriteFile(vmiFile, []byte(benchVMI), 0o644); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--accel", "tcg", "--dir", filepath.Join(dir, "run"),
		"--image-cache", filepath.Join(dir, "cache"), vmiFile)
	cmd.Dir = root
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	}()
	qemuPID := 0
	sc := bufio.NewScanner(out)
	deadline := time.AfterFunc(stepTimeout, func() { _ = cmd.Process.Kill() })
	defer deadline.Stop()
	for sc.Scan() {
		line := sc.Text()
		if i := strings.Index(line, "QEMU pid "); i >= 0 {
			fmt.Sscanf(line[i:], "QEMU pid %d", &qemuPID)
		}
		if strings.Contains(line, "domain: Running") {
			break
		}
	}
	if qemuPID == 0 {
		b.Fatal("kemuctl run did not start the VM")
	}
	go func() {
		for sc.Scan() {
		}
	}()
	// Let the guest boot a little so the launcher has pumped console output.
	settle := time.NewTimer(3 * time.Second)
	<-settle.C
	return rssKiB(b, cmd.Process.Pid), rssKiB(b, qemuPID)
}

func rssKiB(b *testing.B, pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			var kib int
			fmt.Sscanf(strings.TrimPrefix(line, "VmRSS:"), "%d", &kib)
			return kib
		}
	}
	b.Fatalf("no VmRSS for %d", pid)
	return 0
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
