//go:build qemu

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kemu-dev/kemu/hack/images/gobuild"
	"github.com/kemu-dev/kemu/launcher/rpc"
	"github.com/kemu-dev/kemu/netsetup/netsetuptest"
	"github.com/kemu-dev/kemu/test/procmem"
	"github.com/kemu-dev/kemu/test/testguest"
)

// benchVMI is the measurement VM: the test guest with 256Mi on the
// pod network (masquerade), as the launcher Pod runs it.
const benchVMI = `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: bench, namespace: default}
spec:
  domain:
    memory: {guest: 256Mi}
    devices:
      disks: [{name: root, bootOrder: 1, disk: {bus: virtio}}]
  volumes:
  - {name: root, containerDisk: {image: "oci:_out/testguest/oci/containerdisk"}}
`

// benchTimeout bounds one VM's boot in a benchmark (TCG).
const benchTimeout = 3 * time.Minute

// releaseBuild builds cmd/<name> as the images do (static, stripped,
// the release build tags).
func releaseBuild(b *testing.B, name string) string {
	b.Helper()
	bin := filepath.Join(b.TempDir(), name)
	if err := gobuild.Build(bin, "github.com/kemu-dev/kemu/cmd/"+name, ""); err != nil {
		b.Fatal(err)
	}
	return bin
}

// podLauncher is kemu-launcher as in its Pod: the release binary in a pod
// network namespace and a container cgroup of its own, the VMI from a file.
type podLauncher struct {
	cmd    *exec.Cmd
	client rpc.LauncherClient
	// console is the VM's console log (the runtime directory's).
	console string
}

func startPodLauncher(b *testing.B, bin, vmi string) *podLauncher {
	b.Helper()
	root, err := testguest.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	dir := shortDir(b)
	manifest := filepath.Join(dir, "vmi.yaml")
	if err := os.WriteFile(manifest, []byte(vmi), 0o600); err != nil {
		b.Fatal(err)
	}
	pod := netsetuptest.NewPodEnv(b)
	run := filepath.Join(dir, "run")
	cmd := exec.Command("nsenter", "--net="+pod.Path, bin, "--vmi-file", manifest, "--sockets-dir", filepath.Join(dir, "s"),
		"--runtime-dir", run, "--image-cache", filepath.Join(dir, "cache"), "--base-dir", root, "--accel", "tcg")
	container := containerCgroup(b)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: container.fd}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	})
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "s", "launcher.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return &podLauncher{cmd: cmd, client: rpc.NewLauncherClient(conn), console: filepath.Join(run, "console.log")}
}

// watch opens the node agent's WatchDomain stream and follows it until the
// domain runs; the stream stays open, draining, until ctx ends.
func (p *podLauncher) watch(ctx context.Context, b *testing.B) {
	b.Helper()
	w, err := p.client.WatchDomain(ctx, &rpc.WatchRequest{FromSeq: 1}, grpc.WaitForReady(true))
	if err != nil {
		b.Fatal(err)
	}
	for {
		ev, err := w.Recv()
		if err != nil {
			b.Fatal(err)
		}
		if d := ev.GetDomain(); d != nil && d.State == rpc.DomainState_Shutoff {
			b.Fatalf("the VM did not start: %v", d)
		}
		if d := ev.GetDomain(); d != nil && d.State == rpc.DomainState_Running {
			break
		}
	}
	go func() {
		for {
			if _, err := w.Recv(); err != nil {
				return
			}
		}
	}()
}

// waitConsole polls a console log until it holds marker.
func waitConsole(b *testing.B, path, marker string) {
	b.Helper()
	deadline := time.Now().Add(benchTimeout)
	for {
		if data, _ := os.ReadFile(path); strings.Contains(string(data), marker) {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: no %q within %s", path, marker, benchTimeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func qemuPID(ctx context.Context, b *testing.B, c rpc.LauncherClient) int {
	b.Helper()
	d, err := c.GetDomain(ctx, &rpc.Empty{})
	if err != nil {
		b.Fatal(err)
	}
	return int(d.GetDomain().GetQemuPid())
}

func readMem(b *testing.B, pid int) procmem.Usage {
	b.Helper()
	u, err := procmem.Read(pid)
	if err != nil {
		b.Fatal(err)
	}
	return u
}

// guestReady is the test guest's marker once it booted (hack/testguest).
const guestReady = "KEMU-GUEST ready"

// memSettle lets a booted VM's launcher reach its steady state (console
// pump, QMP events, a stats call answered) before it is measured.
const memSettle = 5 * time.Second

// BenchmarkLauncherRSS measures the per-VM process: kemu-launcher as it
// runs in a launcher Pod (the release binary, pod network, its own cgroup,
// the node agent's WatchDomain stream open and one GetStats answered) with
// one booted 256Mi guest — RSS, PSS and anonymous memory; QEMU's RSS; and
// `kemuctl run`'s process with the same VM, for the issue's ≤ 1.5× goal.
// Medians of -benchtime runs.
func BenchmarkLauncherRSS(b *testing.B) {
	launcherBin, kemuctl := releaseBuild(b, "kemu-launcher"), releaseBuild(b, "kemuctl")
	var launcher, run, qemu []procmem.Usage
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), benchTimeout)
		p := startPodLauncher(b, launcherBin, benchVMI)
		p.watch(ctx, b)
		waitConsole(b, p.console, guestReady)
		if _, err := p.client.GetStats(ctx, &rpc.Empty{}); err != nil {
			b.Fatal(err)
		}
		time.Sleep(memSettle)
		launcher = append(launcher, readMem(b, p.cmd.Process.Pid))
		qemu = append(qemu, readMem(b, qemuPID(ctx, b, p.client)))
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		_ = p.cmd.Wait()

		run = append(run, kemuctlRunMem(ctx, b, kemuctl))
		cancel()
	}
	l, r, q := medianUsage(launcher), medianUsage(run), medianUsage(qemu)
	b.ReportMetric(procmem.MiB(l.RSS), "MiB-launcher-RSS")
	b.ReportMetric(procmem.MiB(l.PSS), "MiB-launcher-PSS")
	b.ReportMetric(procmem.MiB(l.Anon), "MiB-launcher-anon")
	b.ReportMetric(procmem.MiB(r.RSS), "MiB-kemuctl-run-RSS")
	b.ReportMetric(float64(r.RSS)/float64(l.RSS), "x-kemuctl-run/launcher")
	b.ReportMetric(procmem.MiB(q.RSS), "MiB-QEMU-RSS")
}

// kemuctlRunMem runs the same VM with `kemuctl run` and measures its
// process once the guest booted.
func kemuctlRunMem(ctx context.Context, b *testing.B, kemuctl string) procmem.Usage {
	b.Helper()
	root, err := testguest.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	dir := shortDir(b)
	manifest := filepath.Join(dir, "vmi.yaml")
	if err := os.WriteFile(manifest, []byte(benchVMI), 0o600); err != nil {
		b.Fatal(err)
	}
	log := filepath.Join(dir, "serial.log")
	cmd := exec.CommandContext(ctx, kemuctl, "run", "--accel", "tcg", "--dir", filepath.Join(dir, "run"),
		"--image-cache", filepath.Join(dir, "cache"), "--serial-log", log, manifest)
	cmd.Dir = root
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	}()
	waitConsole(b, log, guestReady)
	time.Sleep(memSettle)
	return readMem(b, cmd.Process.Pid)
}

// medianUsage is the run with the median RSS.
func medianUsage(us []procmem.Usage) procmem.Usage {
	s := slices.Clone(us)
	slices.SortFunc(s, func(a, b procmem.Usage) int { return int(a.RSS - b.RSS) })
	return s[len(s)/2]
}

// soakDuration is BenchmarkLauncherSoak's length: KEMU_SOAK (a Go
// duration), else the 10 minutes.
func soakDuration(b *testing.B) time.Duration {
	if s := os.Getenv("KEMU_SOAK"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			b.Fatalf("KEMU_SOAK: %v", err)
		}
		return d
	}
	return 10 * time.Minute
}

// soakEvery is the node agent's stats poll in the soak, and the sampling.
const soakEvery = 10 * time.Second

// BenchmarkLauncherSoak keeps one kemu-launcher as in its Pod serving the
// node agent's load — a WatchDomain stream open and GetStats every 10 s —
// for KEMU_SOAK (10 min) and samples its memory every 10 s: the first
// sample (after the first stats call), the last, the largest, the growth
// last − first and over the second half. No growth in the second half means
// nothing accumulates per event or per call.
func BenchmarkLauncherSoak(b *testing.B) {
	bin := releaseBuild(b, "kemu-launcher")
	length := soakDuration(b)
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), length+benchTimeout)
		p := startPodLauncher(b, bin, benchVMI)
		p.watch(ctx, b)
		waitConsole(b, p.console, guestReady)
		var samples []procmem.Usage
		tick := time.NewTicker(soakEvery)
		end := time.Now().Add(length)
		for time.Now().Before(end) {
			if _, err := p.client.GetStats(ctx, &rpc.Empty{}); err != nil {
				b.Fatal(err)
			}
			samples = append(samples, readMem(b, p.cmd.Process.Pid))
			<-tick.C
		}
		tick.Stop()
		first, last := samples[0], samples[len(samples)-1]
		peak := slices.MaxFunc(samples, func(a, b procmem.Usage) int { return int(a.RSS - b.RSS) })
		b.ReportMetric(procmem.MiB(first.RSS), "MiB-RSS-first")
		b.ReportMetric(procmem.MiB(last.RSS), "MiB-RSS-last")
		b.ReportMetric(procmem.MiB(peak.RSS), "MiB-RSS-max")
		b.ReportMetric(procmem.MiB(last.RSS-first.RSS), "MiB-RSS-growth")
		b.ReportMetric(procmem.MiB(last.Anon-first.Anon), "MiB-anon-growth")
		// The first minutes include the runtime's first forced GC (every
		// 2 min) and the heap growing to its goal; what accumulates per
		// call or event shows in the second half.
		mid := samples[len(samples)/2]
		b.ReportMetric(procmem.MiB(last.RSS-mid.RSS), "MiB-RSS-growth-2nd-half")
		b.ReportMetric(procmem.MiB(last.Anon-mid.Anon), "MiB-anon-growth-2nd-half")
		b.ReportMetric(float64(len(samples)), "samples")
		b.Logf("RSS MiB every %s: %s", soakEvery, soakTrace(samples))
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		_ = p.cmd.Wait()
		cancel()
	}
}

func soakTrace(s []procmem.Usage) string {
	var out []string
	for _, u := range s {
		out = append(out, strconv.FormatFloat(procmem.MiB(u.RSS), 'f', 1, 64))
	}
	return strings.Join(out, " ")
}
