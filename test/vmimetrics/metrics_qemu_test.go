//go:build qemu

package vmimetrics

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"sigs.k8s.io/yaml"

	"github.com/kemu-dev/kemu/launcher"
	"github.com/kemu-dev/kemu/launcher/cmdserver"
	"github.com/kemu-dev/kemu/launcher/rpc"
	"github.com/kemu-dev/kemu/netsetup"
	"github.com/kemu-dev/kemu/netsetup/netsetuptest"
	"github.com/kemu-dev/kemu/nodeagent/metrics"
	"github.com/kemu-dev/kemu/nodeagent/vmi"
	"github.com/kemu-dev/kemu/qmp"
	"github.com/kemu-dev/kemu/test/testguest"
)

const (
	bootTimeout = 120 * time.Second
	stepTimeout = 60 * time.Second
	ns, name    = "default", "metrics"
	uid         = "6d1f0c3a-6b7e-4c39-9a55-1f2e3d4c5b6a"
	node        = "node-a"
)

// vmiYAML is the kernel-boot test guest with an emptyDisk to write to and
// the pod network (masquerade, port 8080 forwarded); the balloon is
// attached by default.
const vmiYAML = `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: metrics, namespace: default, uid: 6d1f0c3a-6b7e-4c39-9a55-1f2e3d4c5b6a}
spec:
  domain:
    memory: {guest: 256Mi}
    firmware:
      kernelBoot:
        kernelArgs: console=ttyS0 quiet
        container: {image: "oci:_out/testguest/oci/kernelboot", kernelPath: /boot/vmlinuz, initrdPath: /boot/initrd.img}
    devices:
      disks: [{name: scratch, disk: {bus: virtio}}]
      interfaces: [{name: default, masquerade: {}, ports: [{port: 8080}]}]
  networks: [{name: default, pod: {}}]
  volumes: [{name: scratch, emptyDisk: {capacity: 64Mi}}]
`

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// startLauncher serves a launcher command server wiring the pod network
// in env's pod namespace and returns it with a client on its socket.
func startLauncher(t *testing.T, env *netsetuptest.PodEnv) (*cmdserver.Server, rpc.LauncherClient) {
	t.Helper()
	root, err := testguest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testguest.Paths(); err != nil {
		t.Fatal(err)
	}
	base := testguest.TempDir(t, "kemu-vm-")
	s := cmdserver.New(cmdserver.Options{SocketsDir: filepath.Join(base, "s"), Config: launcher.Config{
		Dir: filepath.Join(base, "run"), ImageCache: filepath.Join(base, "cache"), BaseDir: root, Accel: "tcg",
		PodNetwork: &netsetup.Options{NetNSPath: env.Path, TapUID: -1, TapGID: -1}}})
	if err := s.Start(ctxFor(t, stepTimeout)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	t.Cleanup(func() {
		if l := s.Launcher(); l != nil {
			if _, err := l.Kill(ctxFor(t, stepTimeout)); err != nil {
				t.Errorf("kill: %v", err)
			}
		}
	})
	conn, err := grpc.NewClient("unix://"+s.Socket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return s, rpc.NewLauncherClient(conn)
}

// agent waits for the guest agent (it answers a few seconds after boot).
func agent(t *testing.T, s *cmdserver.Server, c rpc.LauncherClient) *qmp.Agent {
	t.Helper()
	var err error
	for ctx := ctxFor(t, bootTimeout); ctx.Err() == nil; {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = c.GuestPing(pctx, &rpc.Empty{})
		cancel()
		if err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("guest ping: %v", err)
	}
	a, err := s.Launcher().Agent(ctxFor(t, stepTimeout))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// sh runs script with the guest's /bin/sh; a non-zero exit fails the test.
func sh(t *testing.T, a *qmp.Agent, script string) string {
	t.Helper()
	st, err := a.Run(ctxFor(t, stepTimeout), "/bin/sh", []string{"-c", script}, nil)
	if err != nil || st.ExitCode != 0 {
		t.Fatalf("guest: %q: exit %d signal %d %v\nstdout: %s\nstderr: %s", script, st.ExitCode, st.Signal, err, st.Stdout, st.Stderr)
	}
	return strings.TrimSpace(string(st.Stdout))
}

// statsUntil polls GetStats until ok accepts the figures (60 s).
func statsUntil(t *testing.T, c rpc.LauncherClient, what string, ok func(*rpc.StatsResponse) bool) *rpc.StatsResponse {
	t.Helper()
	ctx := ctxFor(t, stepTimeout)
	var st *rpc.StatsResponse
	for {
		var err error
		if st, err = c.GetStats(ctx, &rpc.Empty{}); err != nil {
			t.Fatalf("GetStats: %v", err)
		}
		if ok(st) {
			return st
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within %s; last stats: %v", what, stepTimeout, st)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func iface(st *rpc.StatsResponse, n string) *rpc.InterfaceStat {
	for _, i := range st.Interfaces {
		if i.Name == n {
			return i
		}
	}
	return nil
}

func drive(st *rpc.StatsResponse, n string) *rpc.BlockStat {
	for _, b := range st.Blocks {
		if b.Drive == n {
			return b
		}
	}
	return nil
}

// TestVMIMetrics: the launcher's GetStats reports the guest's NIC, drive
// and balloon memory figures, they rise as the guest computes, writes to
// its disk and serves HTTP over the pod network, and a scrape of the node
// agent's registry with the VMI collector passes promtool.
func TestVMIMetrics(t *testing.T) {
	promtool, err := filepath.Abs(filepath.Join("..", "..", "_out", "tools", "bin", "promtool"))
	if err != nil {
		t.Fatal(err)
	}
	env := netsetuptest.NewPodEnv(t)
	srv, c := startLauncher(t, env)
	vmiJSON, err := yaml.YAMLToJSON([]byte(vmiYAML))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Sync(ctxFor(t, 5*time.Minute), &rpc.SyncRequest{VmiJson: vmiJSON}); err != nil {
		t.Fatal(err)
	}
	a := agent(t, srv, c)

	// Before the work: every figure there, the guest's memory once its
	// balloon driver reported (QEMU polls it every BalloonStatsPeriod).
	before := statsUntil(t, c, "NIC, drive and guest memory figures", func(st *rpc.StatsResponse) bool {
		g := st.GuestMemory
		return iface(st, "default") != nil && drive(st, "scratch") != nil && len(st.Vcpus) == 1 &&
			g != nil && g.TotalBytes != nil && g.FreeBytes != nil && g.MinorFaults != nil
	})
	if g := before.GuestMemory; *g.TotalBytes <= 0 || *g.TotalBytes > 256<<20 || *g.FreeBytes > *g.TotalBytes {
		t.Errorf("guest memory: total %d, free %d bytes (256 MiB guest)", *g.TotalBytes, *g.FreeBytes)
	}
	for _, b := range before.Blocks {
		if b.Drive != "" && b.Drive != "scratch" {
			t.Errorf("block node %s reported as drive %q", b.NodeName, b.Drive)
		}
	}
	if before.Migration != nil {
		t.Errorf("migration figures without a migration: %v", before.Migration)
	}

	// The work: CPU, 4 MiB written and flushed to the scratch disk, HTTP
	// fetched from the node's side of the pod network.
	dev := sh(t, a, "for b in /sys/block/vd*; do echo /dev/${b##*/}; done | head -n1")
	sh(t, a, "dd if=/dev/urandom bs=64k count=64 2>/dev/null | md5sum && dd if=/dev/urandom of="+dev+" bs=64k count=64 conv=fsync")
	sh(t, a, "mkdir -p /tmp/www && head -c 65536 /dev/urandom > /tmp/www/blob && httpd -p 8080 -h /tmp/www")
	for i := 0; i < 3; i++ {
		var body string
		for end := time.Now().Add(30 * time.Second); ; {
			body, err = netsetuptest.HTTPGet(ctxFor(t, stepTimeout), env.Node, netsetuptest.PodIP+":8080", "/blob")
			if err == nil || time.Now().After(end) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err != nil || len(body) < 60000 {
			t.Fatalf("GET /blob from the node: %d bytes, %v", len(body), err)
		}
	}

	after := statsUntil(t, c, "the guest's memory report after the work", func(st *rpc.StatsResponse) bool {
		return st.GuestMemory != nil && st.GuestMemory.LastUpdateUnix > before.GuestMemory.LastUpdateUnix
	})
	if a, b := after.Vcpus[0].CpuTimeNanos, before.Vcpus[0].CpuTimeNanos; a <= b {
		t.Errorf("vCPU time %d ns after the work, %d before", a, b)
	}
	if a, b := after.Vcpus[0].DelayNanos, before.Vcpus[0].DelayNanos; a == nil || b == nil || *a < *b {
		t.Errorf("vCPU run-queue delay %v ns after the work, %v before", a, b)
	}
	if after.QemuCpuTimeNanos <= before.QemuCpuTimeNanos {
		t.Errorf("QEMU's CPU time %d ns after the work, %d before", after.QemuCpuTimeNanos, before.QemuCpuTimeNanos)
	}
	bd, ad := drive(before, "scratch"), drive(after, "scratch")
	if ad.WrBytes-bd.WrBytes < 4<<20 || ad.WrOperations <= bd.WrOperations || ad.WrTotalTimeNanos <= bd.WrTotalTimeNanos || ad.FlushOperations <= bd.FlushOperations {
		t.Errorf("scratch drive before %v, after %v: want 4 MiB more written, more writes, write time and flushes", bd, ad)
	}
	bi, ai := iface(before, "default"), iface(after, "default")
	// The guest sent three 64 KiB bodies and received the requests.
	if ai.TxBytes-bi.TxBytes < 3*65536 || ai.TxPackets <= bi.TxPackets || ai.RxBytes <= bi.RxBytes || ai.RxPackets <= bi.RxPackets {
		t.Errorf("interface default before %v, after %v: want 192 KiB more sent, more received", bi, ai)
	}
	if *after.GuestMemory.MinorFaults <= *before.GuestMemory.MinorFaults {
		t.Errorf("guest minor faults %d after the work, %d before", *after.GuestMemory.MinorFaults, *before.GuestMemory.MinorFaults)
	}

	// A scrape of the node agent's registry with the VMI collector (what
	// kemu-nodeagent serves on /metrics) passes promtool.
	col, err := metrics.New(metrics.Config{Node: node, Targets: func() []metrics.Target {
		return []metrics.Target{{Namespace: ns, Name: name, UID: uid, Client: c, Info: metrics.Info{Phase: "Running", MachineType: "q35"}}}
	}})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	web := httptest.NewServer(promhttp.HandlerFor(prometheus.Gatherers{vmi.Registry, reg}, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	defer web.Close()
	start := time.Now()
	resp, err := http.Get(web.URL)
	if err != nil {
		t.Fatal(err)
	}
	page, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %s %v", resp.Status, err)
	}
	t.Logf("one scrape with 1 VMI (a GetStats included): %s, %d bytes", took, len(page))
	for _, want := range []string{
		`kemu_vmi_info{guest_os_kernel_release="",guest_os_machine="",guest_os_name="",guest_os_version_id="",machine_type="q35",name="metrics",namespace="default",node="node-a",phase="Running"} 1`,
		`kemu_vmi_cpu_usage_seconds_total{name="metrics",namespace="default",node="node-a"}`,
		`kemu_vmi_vcpu_seconds_total{id="0",name="metrics",namespace="default",node="node-a"}`,
		`kemu_vmi_vcpu_delay_seconds_total{id="0",name="metrics",namespace="default",node="node-a"}`,
		`kemu_vmi_memory_resident_bytes{`, `kemu_vmi_memory_used_bytes{`, `kemu_vmi_memory_pgminfault_total{`,
		`kemu_vmi_network_transmit_bytes_total{interface="default",name="metrics",namespace="default",node="node-a"}`,
		`kemu_vmi_storage_write_traffic_bytes_total{drive="scratch",name="metrics",namespace="default",node="node-a"}`,
		`kemu_vmi_storage_write_times_seconds_total{drive="scratch",`,
		`kemu_nodeagent_vmi_stats_errors_total 0`,
	} {
		if !bytes.Contains(page, []byte(want)) {
			t.Errorf("the scrape has no %s", want)
		}
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(page)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s\n%s", err, out, page)
	}
}
