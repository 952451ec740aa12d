//go:build qemu

package cmdserver_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"sigs.k8s.io/yaml"

	"github.com/kemu-dev/kemu/api/launcherpod"
	"github.com/kemu-dev/kemu/launcher"
	"github.com/kemu-dev/kemu/launcher/cmdserver"
	"github.com/kemu-dev/kemu/launcher/rpc"
	"github.com/kemu-dev/kemu/qmp"
	"github.com/kemu-dev/kemu/test/testguest"
)

const (
	bootTimeout = 120 * time.Second // TCG, two guests at once on 2 cores
	stepTimeout = 60 * time.Second
)

const vmiYAML = `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: NAME, uid: 11111111-2222-3333-4444-555555555555}
spec:
  terminationGracePeriodSeconds: 60
  domain:
    memory: {guest: 256Mi}
    devices:
      autoattachPodInterface: false
      disks:
      - {name: root, bootOrder: 1, disk: {bus: virtio}}
  volumes:
  - {name: root, containerDisk: {image: "oci:_out/testguest/oci/containerdisk"}}
`

func vmiJSON(t testing.TB, name string, edit ...func(string) string) []byte {
	t.Helper()
	y := strings.Replace(vmiYAML, "NAME", name, 1)
	for _, e := range edit {
		y = e(y)
	}
	b, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// launcherServer is a command server that creates its launcher on Sync.
func launcherServer(t testing.TB, opts ...func(*cmdserver.Options)) (*cmdserver.Server, rpc.LauncherClient) {
	t.Helper()
	root, err := testguest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testguest.Paths(); err != nil {
		t.Fatal(err)
	}
	base := shortDir(t)
	o := cmdserver.Options{SocketsDir: filepath.Join(base, "s"), Config: launcher.Config{
		Dir: filepath.Join(base, "run"), ImageCache: filepath.Join(base, "cache"), BaseDir: root, Accel: "tcg"}}
	for _, f := range opts {
		f(&o)
	}
	s := startServer(t, o)
	t.Cleanup(func() {
		if l := s.Launcher(); l != nil {
			ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
			defer cancel()
			if _, err := l.Kill(ctx); err != nil {
				t.Errorf("kill: %v", err)
			}
		}
	})
	c, _ := dial(t, s.Socket())
	return s, c
}

// consoleReader collects a Console stream's output.
type consoleReader struct {
	mu  sync.Mutex
	buf bytes.Buffer
	ch  chan struct{}
	err error
}

func readConsole(stream rpc.Launcher_ConsoleClient) *consoleReader {
	r := &consoleReader{ch: make(chan struct{}, 1)}
	go func() {
		for {
			m, err := stream.Recv()
			r.mu.Lock()
			if err != nil {
				r.err = err
			} else {
				r.buf.Write(m.Data)
			}
			r.mu.Unlock()
			select {
			case r.ch <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	return r
}

func (r *consoleReader) waitFor(ctx context.Context, s string) error {
	return r.waitForCount(ctx, s, 1)
}

// count is how often s was seen so far.
func (r *consoleReader) count(s string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Count(r.buf.String(), s)
}

// waitForCount waits until s was seen n times.
func (r *consoleReader) waitForCount(ctx context.Context, s string, n int) error {
	for {
		r.mu.Lock()
		ok, err := strings.Count(r.buf.String(), s) >= n, r.err
		r.mu.Unlock()
		if ok {
			return nil
		}
		if err != nil {
			return err
		}
		select {
		case <-r.ch:
		case <-ctx.Done():
			return fmt.Errorf("%q not seen on the console: %w", s, ctx.Err())
		}
	}
}

func recvDomain(t testing.TB, w rpc.Launcher_WatchDomainClient, qmpEvents map[string]bool) *rpc.Domain {
	t.Helper()
	for {
		ev, err := w.Recv()
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		if d := ev.GetDomain(); d != nil {
			return d
		}
		if qmpEvents != nil {
			qmpEvents[ev.GetQmpEvent().GetName()] = true
		}
	}
}

// Every RPC against a real launcher and QEMU.
func TestCommandServerWithQEMU(t *testing.T) {
	s, c := launcherServer(t)
	ctx := ctxFor(t, 5*time.Minute)

	// A watcher connected before the VM exists waits for it.
	early, err := c.WatchDomain(ctx, &rpc.WatchRequest{FromSeq: 1})
	if err != nil {
		t.Fatal(err)
	}

	r, err := c.Sync(ctx, &rpc.SyncRequest{VmiJson: vmiJSON(t, "cs")})
	if err != nil {
		t.Fatal(err)
	}
	if r.Action != cmdserver.ActionStarted || r.Domain.State != rpc.DomainState_Running {
		t.Fatalf("first sync: %v", r)
	}
	if d := recvDomain(t, early, nil); d.Seq != 1 || d.State != rpc.DomainState_Starting {
		t.Errorf("early watcher's first change: %v", d)
	}
	if r, err := c.Sync(ctx, &rpc.SyncRequest{VmiJson: vmiJSON(t, "cs")}); err != nil || r.Action != cmdserver.ActionUnchanged {
		t.Fatalf("second sync: %v %v", r, err)
	}
	_, err = c.Sync(ctx, &rpc.SyncRequest{VmiJson: vmiJSON(t, "cs", func(y string) string {
		return strings.Replace(y, "11111111", "99999999", 1)
	})})
	wantCode(t, err, codes.FailedPrecondition, "uid")
	_, err = c.Sync(ctx, &rpc.SyncRequest{VmiJson: vmiJSON(t, "cs", func(y string) string {
		return strings.Replace(y, "256Mi", "512Mi", 1)
	})})
	wantCode(t, err, codes.FailedPrecondition, "spec.domain.memory.guest")
	r, err = c.Sync(ctx, &rpc.SyncRequest{VmiJson: vmiJSON(t, "cs", func(y string) string {
		return strings.Replace(y, "terminationGracePeriodSeconds: 60", "terminationGracePeriodSeconds: 45", 1)
	})})
	if err != nil || r.Action != cmdserver.ActionUpdated || s.Grace() != 45*time.Second {
		t.Fatalf("grace update: %v %v %s", r, err, s.Grace())
	}

	// The console, from the start: markers (output).
	cs, err := c.Console(ctx)
	if err != nil {
		t.Fatal(err)
	}
	con := readConsole(cs)

	d, err := c.GetDomain(ctx, &rpc.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if dd := d.Domain; dd.State != rpc.DomainState_Running || dd.QemuPid <= 0 || dd.QemuVersion != qemuVersion(t) ||
		dd.Accelerator != "tcg" || dd.StartedUnixNano == 0 || dd.VmiUid != "11111111-2222-3333-4444-555555555555" {
		t.Errorf("domain: %v", dd)
	}

	q, err := c.Qmp(ctx, &rpc.QmpRequest{CommandJson: `{"execute":"query-status"}`})
	if err != nil || !strings.Contains(q.ReplyJson, `"running":true`) {
		t.Errorf("qmp query-status: %v %v", q, err)
	}
	q, err = c.Qmp(ctx, &rpc.QmpRequest{CommandJson: `{"execute":"query-no-such-command"}`})
	if err != nil || !strings.Contains(q.ReplyJson, "CommandNotFound") {
		t.Errorf("qmp error reply: %v %v", q, err)
	}
	_, err = c.Qmp(ctx, &rpc.QmpRequest{CommandJson: `{"execute":`})
	wantCode(t, err, codes.InvalidArgument)
	// Without --allow-raw-qmp: nothing but read-only commands, and no
	// second QMP socket to go around that.
	for _, cmd := range []string{`{"execute":"stop"}`, `{"execute":"human-monitor-command","arguments":{"command-line":"stop"}}`} {
		_, err = c.Qmp(ctx, &rpc.QmpRequest{CommandJson: cmd})
		wantCode(t, err, codes.PermissionDenied, "--"+launcherpod.FlagAllowRawQMP)
	}
	if d, _ := c.GetDomain(ctx, &rpc.Empty{}); d.GetDomain().GetState() != rpc.DomainState_Running {
		t.Errorf("after refused commands: %v", d)
	}
	if dbg := s.Launcher().DebugQMPSocket(); dbg == "" {
		t.Error("the launcher has no debug QMP socket path")
	} else if _, err := os.Stat(dbg); !os.IsNotExist(err) {
		t.Errorf("the debug QMP socket %s is still there without --allow-raw-qmp: %v", dbg, err)
	}

	if err := con.waitFor(ctxFor(t, bootTimeout), "KEMU-GUEST ready"); err != nil {
		t.Fatal(err)
	}
	// Console input: the guest's tty echoes what is typed (the test guest
	// has no shell on its console, so the echo is the round trip).
	if err := cs.Send(&rpc.ConsoleInput{Data: []byte("kemu-echo-4711\n")}); err != nil {
		t.Fatal(err)
	}
	if err := con.waitFor(ctxFor(t, stepTimeout), "kemu-echo-4711"); err != nil {
		t.Errorf("console round trip: %v", err)
	}

	// Pause and unpause, seen on a watcher with QMP events; a watcher that
	// disconnects and reconnects with from_seq misses nothing.
	w1ctx, cancelW1 := context.WithCancel(ctx)
	w1, err := c.WatchDomain(w1ctx, &rpc.WatchRequest{QmpEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	cur := recvDomain(t, w1, nil)
	if cur.State != rpc.DomainState_Running {
		t.Fatalf("watch starts with %v", cur)
	}
	_, err = c.Unpause(ctx, &rpc.Empty{})
	wantCode(t, err, codes.FailedPrecondition, "Running")
	if _, err := c.Pause(ctx, &rpc.Empty{}); err != nil {
		t.Fatal(err)
	}
	qmpSeen := map[string]bool{}
	paused := recvDomain(t, w1, qmpSeen)
	if paused.State != rpc.DomainState_Paused || paused.Reason != rpc.DomainReason_User || paused.Seq <= cur.Seq {
		t.Errorf("after pause: %v", paused)
	}
	_, err = c.Pause(ctx, &rpc.Empty{})
	wantCode(t, err, codes.FailedPrecondition, "Paused")
	cancelW1() // disconnect mid-stream
	if _, err := c.Unpause(ctx, &rpc.Empty{}); err != nil {
		t.Fatal(err)
	}
	w2, err := c.WatchDomain(ctx, &rpc.WatchRequest{FromSeq: paused.Seq + 1, QmpEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	resumed := recvDomain(t, w2, nil)
	if resumed.Seq != paused.Seq+1 || resumed.State != rpc.DomainState_Running {
		t.Errorf("after reconnect: %v, want seq %d Running", resumed, paused.Seq+1)
	}
	if _, err := c.Pause(ctx, &rpc.Empty{}); err != nil {
		t.Fatal(err)
	}
	for !qmpSeen["STOP"] {
		if d := recvDomain(t, w2, qmpSeen); d.State != rpc.DomainState_Paused {
			t.Errorf("unexpected %v", d)
		}
	}
	if _, err := c.Unpause(ctx, &rpc.Empty{}); err != nil {
		t.Fatal(err)
	}

	// The guest agent answers a few seconds after boot.
	var pingErr error
	for actx := ctxFor(t, bootTimeout); actx.Err() == nil; {
		pctx, cancel := context.WithTimeout(actx, 5*time.Second)
		_, pingErr = c.GuestPing(pctx, &rpc.Empty{})
		cancel()
		if pingErr == nil {
			break
		}
	}
	if pingErr != nil {
		t.Fatalf("guest ping: %v", pingErr)
	}
	gi, err := c.GuestInfo(ctx, &rpc.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if gi.OsId != "kemu-testguest" || gi.AgentVersion == "" || gi.Hostname == "" || gi.KernelRelease == "" || len(gi.Interfaces) == 0 {
		t.Errorf("guest info: %v", gi)
	}
	if d, _ := c.GetDomain(ctx, &rpc.Empty{}); !d.GetDomain().GetAgentConnected() {
		t.Errorf("agent not connected: %v", d)
	}

	st, err := c.GetStats(ctx, &rpc.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Vcpus) != 1 || st.Vcpus[0].ThreadId <= 0 || st.Vcpus[0].CpuTimeNanos <= 0 || len(st.Blocks) == 0 || st.BalloonActualBytes != 256<<20 {
		t.Errorf("stats: %v", st)
	}
	// QEMU's cgroup counts every thread, the vCPU's among them.
	if st.QemuCpuTimeNanos < st.Vcpus[0].GetCpuTimeNanos() || st.QemuRssBytes < 32<<20 {
		t.Errorf("QEMU's CPU time %d ns (vCPU %d ns), RSS %d bytes", st.QemuCpuTimeNanos, st.Vcpus[0].GetCpuTimeNanos(), st.QemuRssBytes)
	}

	// 20 concurrent clients.
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cc, _ := dial(t, s.Socket())
			for j := 0; j < 10; j++ {
				if _, err := cc.Ping(ctx, &rpc.PingRequest{}); err != nil {
					errs <- err
					return
				}
				if d, err := cc.GetDomain(ctx, &rpc.Empty{}); err != nil || d.Domain.State != rpc.DomainState_Running {
					errs <- fmt.Errorf("%v %v", d, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent client: %v", err)
	}

	// A soft reboot: with the agent connected, through it (guest-shutdown
	// mode=reboot: the guest prints its reboot marker), which the guest
	// answers by rebooting itself (a guest-initiated RESET) and booting
	// again. Not while paused.
	if _, err := c.Pause(ctx, &rpc.Empty{}); err != nil {
		t.Fatal(err)
	}
	_, err = c.SoftReboot(ctx, &rpc.Empty{})
	wantCode(t, err, codes.FailedPrecondition, "soft reboot", "Running")
	if _, err := c.Unpause(ctx, &rpc.Empty{}); err != nil {
		t.Fatal(err)
	}
	wr, err := c.WatchDomain(ctx, &rpc.WatchRequest{QmpEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	softReboot := func(want rpc.RebootMethod) {
		t.Helper()
		readies := con.count("KEMU-GUEST ready ")
		r, err := c.SoftReboot(ctx, &rpc.Empty{})
		if err != nil {
			t.Fatalf("soft reboot: %v", err)
		}
		if r.GetMethod() != want {
			t.Errorf("soft reboot method %s, want %s", r.GetMethod(), want)
		}
		for {
			ev, err := wr.Recv()
			if err != nil {
				t.Fatalf("watch after the soft reboot: %v", err)
			}
			if q := ev.GetQmpEvent(); q.GetName() == "RESET" {
				if !strings.Contains(q.GetDataJson(), `"guest":true`) {
					t.Errorf("RESET after a soft reboot (%s): %s, want guest true", want, q.GetDataJson())
				}
				break
			}
		}
		if err := con.waitForCount(ctxFor(t, bootTimeout), "KEMU-GUEST ready ", readies+1); err != nil {
			t.Errorf("the guest did not boot again after the soft reboot (%s): %v", want, err)
		}
	}
	agentReboots := con.count("KEMU-GUEST reboot source=agent")
	softReboot(rpc.RebootMethod_GuestAgent)
	if n := con.count("KEMU-GUEST reboot source=agent"); n != agentReboots+1 {
		t.Errorf("%d reboot source=agent markers after a soft reboot through the agent, want %d", n, agentReboots+1)
	}
	// The reboot dropped the agent's connection (the guest's agent starts
	// over): the next soft reboot is Ctrl+Alt+Delete on the keyboard.
	if d, err := c.GetDomain(ctx, &rpc.Empty{}); err != nil || d.GetDomain().GetAgentConnected() {
		t.Fatalf("agent still connected after the reboot: %v %v", d, err)
	}
	softReboot(rpc.RebootMethod_CtrlAltDelete)
	if n := con.count("KEMU-GUEST reboot source=agent"); n != agentReboots+1 {
		t.Errorf("Ctrl+Alt+Delete went through the agent: %d reboot source=agent markers", n)
	}

	// Reset, then a graceful shutdown (the power button is pressed again
	// while the guest reboots).
	if _, err := c.Reset(ctx, &rpc.Empty{}); err != nil {
		t.Fatal(err)
	}
	// The guest's agent starts over with the guest: no longer connected.
	for end := time.Now().Add(stepTimeout); ; {
		d, err := c.GetDomain(ctx, &rpc.Empty{})
		if err == nil && !d.GetDomain().GetAgentConnected() {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("agent still connected after a reset: %v %v", d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	sr, err := c.Shutdown(ctx, &rpc.ShutdownRequest{GracePeriodSeconds: 90})
	if err != nil {
		t.Fatal(err)
	}
	if d := sr.Domain; d.State != rpc.DomainState_Shutoff || d.Reason != rpc.DomainReason_GuestShutdown || !d.Exited || d.ExitCode != 0 {
		t.Errorf("after shutdown: %v", d)
	}
	// Both watchers end with Shutoff; the console stream ends.
	for {
		if d := recvDomain(t, w2, nil); d.State == rpc.DomainState_Shutoff {
			break
		}
	}
	if _, err := w2.Recv(); err == nil {
		t.Error("watch stream did not end after Shutoff")
	}
	if err := con.waitFor(ctxFor(t, stepTimeout), "\x00never"); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("console stream did not end: %v", err)
	}
	_, err = c.Pause(ctx, &rpc.Empty{})
	wantCode(t, err, codes.Unavailable, "QEMU is gone")
	if d, err := c.Shutdown(ctx, &rpc.ShutdownRequest{}); err != nil || d.Domain.State != rpc.DomainState_Shutoff {
		t.Errorf("shutdown again: %v %v", d, err)
	}
	_, err = c.Sync(ctx, &rpc.SyncRequest{VmiJson: vmiJSON(t, "cs", func(y string) string {
		return strings.Replace(y, "256Mi", "512Mi", 1)
	})})
	wantCode(t, err, codes.FailedPrecondition)
}

// Kill ends QEMU at once; a client that goes away during Shutdown does not
// cut the grace period short.
func TestCommandServerKill(t *testing.T) {
	_, c := launcherServer(t)
	ctx := ctxFor(t, 5*time.Minute)
	if _, err := c.Sync(ctx, &rpc.SyncRequest{VmiJson: vmiJSON(t, "kill")}); err != nil {
		t.Fatal(err)
	}
	w, err := c.WatchDomain(ctx, &rpc.WatchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	recvDomain(t, w, nil)
	sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = c.Shutdown(sctx, &rpc.ShutdownRequest{GracePeriodSeconds: 120})
	cancel()
	wantCode(t, err, codes.DeadlineExceeded)
	d, err := c.GetDomain(ctx, &rpc.Empty{})
	if err != nil || d.Domain.State == rpc.DomainState_Shutoff {
		t.Fatalf("the VM must still be shutting down: %v %v", d, err)
	}
	k, err := c.Kill(ctx, &rpc.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if k.Domain.State != rpc.DomainState_Shutoff || k.Domain.Reason != rpc.DomainReason_HostRequest {
		t.Errorf("after kill: %v", k.Domain)
	}
	for {
		ev, err := w.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Errorf("watch ended with %v", err)
			}
			break
		}
		if d := ev.GetDomain(); d != nil && d.State == rpc.DomainState_Shutoff && d.Reason != rpc.DomainReason_HostRequest {
			t.Errorf("shutoff: %v", d)
		}
	}
}

// With AllowRawQMP (kemu-launcher --allow-raw-qmp) any command passes and
// QEMU's debug QMP socket stays; RemoveDebugQMP refuses to vouch for a
// socket a client got connected to.
func TestCommandServerAllowRawQMP(t *testing.T) {
	s, c := launcherServer(t, func(o *cmdserver.Options) { o.AllowRawQMP = true })
	ctx := ctxFor(t, 3*time.Minute)
	if _, err := c.Sync(ctx, &rpc.SyncRequest{VmiJson: vmiJSON(t, "raw")}); err != nil {
		t.Fatal(err)
	}
	w, err := c.WatchDomain(ctx, &rpc.WatchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if d := recvDomain(t, w, nil); d.State != rpc.DomainState_Running {
		t.Fatalf("after sync: %v", d)
	}
	q, err := c.Qmp(ctx, &rpc.QmpRequest{CommandJson: `{"execute":"stop"}`})
	if err != nil || q.ReplyJson != `{"return":{}}` {
		t.Fatalf("qmp stop with the flag: %v %v", q, err)
	}
	if d := recvDomain(t, w, nil); d.State != rpc.DomainState_Paused {
		t.Errorf("after a raw stop: %v", d)
	}
	q, err = c.Qmp(ctx, &rpc.QmpRequest{CommandJson: `{"execute":"human-monitor-command","arguments":{"command-line":"info status"}}`})
	if err != nil || !strings.Contains(q.ReplyJson, "VM status: paused") {
		t.Errorf("HMP info status with the flag: %v %v", q, err)
	}

	dbg := s.Launcher().DebugQMPSocket()
	m, err := qmp.Dial(ctx, dbg)
	if err != nil {
		t.Fatalf("the debug QMP socket with the flag: %v", err)
	}
	if st, err := m.QueryStatus(ctx); err != nil || st.Status != "paused" {
		t.Errorf("query-status on the debug socket: %+v %v", st, err)
	}
	// A client is on the debug socket: RemoveDebugQMP unlinks it and says so.
	err = cmdserver.RemoveDebugQMP(ctx, s.Launcher().Monitor(), dbg)
	if err == nil || !strings.Contains(err.Error(), "a client connected to the debug QMP socket") {
		t.Errorf("RemoveDebugQMP with a client connected: %v", err)
	}
	if _, err := os.Stat(dbg); !os.IsNotExist(err) {
		t.Errorf("RemoveDebugQMP left %s: %v", dbg, err)
	}
	m.Close()
	// Once the client left (QEMU notices on its own time), nothing is.
	deadline := time.Now().Add(stepTimeout)
	for err = errors.New("not tried"); err != nil && time.Now().Before(deadline); {
		if err = cmdserver.RemoveDebugQMP(ctx, s.Launcher().Monitor(), dbg); err != nil {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if err != nil {
		t.Errorf("RemoveDebugQMP after the client left: %v", err)
	}
}

// Abandon (the launcher main on SIGTERM before the VM started) kills a VM
// whose start finished meanwhile.
func TestCommandServerAbandonKillsAStartedVM(t *testing.T) {
	s, c := launcherServer(t)
	ctx := ctxFor(t, 3*time.Minute)
	if _, err := c.Sync(ctx, &rpc.SyncRequest{VmiJson: vmiJSON(t, "abandon")}); err != nil {
		t.Fatal(err)
	}
	d, killed, err := s.Abandon(ctx)
	if err != nil || !killed || d.State != launcher.StateShutoff || d.Reason != launcher.ReasonHostRequest {
		t.Errorf("Abandon with a running VM: %s, killed %v, %v", d, killed, err)
	}
}

// qemuVersion is the version of the QEMU the tests start.
func qemuVersion(t testing.TB) string {
	t.Helper()
	v, err := testguest.QEMUVersion()
	if err != nil {
		t.Fatal(err)
	}
	return v
}
