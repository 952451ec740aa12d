//go:build qemu

// Guest agent tests: boot the test guest (bash hack/testguest/build.sh)
// under QEMU (TCG) and talk to its qemu-ga.
package qmp_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kemu-dev/kemu/qmp"
	"github.com/kemu-dev/kemu/test/testguest"
)

// guestVM is the test guest booted with a guest agent port.
type guestVM struct {
	*qemuProc
	art     testguest.Artifacts
	w       *testguest.Watcher
	m       *qmp.Monitor
	qga     string // the agent's chardev socket
	resumed time.Time
}

// startGuest boots the test guest (direct kernel boot, paused until the
// serial console and QMP are attached, so no console line is lost).
func startGuest(t *testing.T) *guestVM {
	t.Helper()
	art, err := testguest.Paths()
	if err != nil {
		t.Fatal(err)
	}
	dir := shortDir(t)
	vm := &guestVM{art: art, qga: filepath.Join(dir, "g.sock")}
	args := []string{
		"-machine", "q35,accel=tcg", "-m", "256", "-smp", "1",
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-S",
		"-kernel", art.Kernel, "-initrd", art.Initrd, "-append", "console=ttyS0 quiet kemu.dhcp=0 kemu.tick=0",
		"-chardev", "socket,id=ser0,path=" + filepath.Join(dir, "s.sock") + ",server=on,wait=off",
		"-serial", "chardev:ser0",
		"-qmp", "unix:" + filepath.Join(dir, "q.sock") + ",server=on,wait=off",
		"-device", "virtio-serial-pci,id=vser0",
		"-chardev", "socket,id=qga0,path=" + vm.qga + ",server=on,wait=off",
		"-device", "virtserialport,bus=vser0.0,chardev=qga0,name=org.qemu.guest_agent.0",
	}
	vm.qemuProc = startQEMUArgs(t, dir, args)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	serial, err := vm.dialUnix(ctx, filepath.Join(dir, "s.sock"))
	if err != nil {
		t.Fatalf("serial console: %v", err)
	}
	t.Cleanup(func() { serial.Close() })
	vm.w = testguest.NewWatcher(serial)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("serial console:\n%s", vm.w.Log())
		}
	})
	vm.m = vm.monitor(vm.qmpPath())
	if err := vm.m.Cont(ctx); err != nil {
		t.Fatal(err)
	}
	vm.resumed = time.Now()
	return vm
}

func (vm *guestVM) marker(t *testing.T, d time.Duration, kind string, kv ...string) testguest.Marker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	m, err := vm.w.WaitKind(ctx, kind, kv...)
	if err != nil {
		t.Fatalf("waiting for marker %s %v: %v", kind, kv, err)
	}
	return m
}

// dialAgent connects a qmp.Agent, closed at cleanup.
func (vm *guestVM) dialAgent(t *testing.T, ctx context.Context) *qmp.Agent {
	t.Helper()
	a, err := dialAgentRetry(ctx, vm.qga)
	if err != nil {
		t.Fatalf("DialAgent: %v", err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

// dialAgentRetry is qmp.DialAgent, retried while connect fails with EAGAIN:
// QEMU's chardev socket has a listen backlog of 1 and accepts the next client
// only once it has processed the previous one's departure.
func dialAgentRetry(ctx context.Context, path string) (*qmp.Agent, error) {
	var a *qmp.Agent
	err := retryEAGAIN(ctx, func() (err error) {
		a, err = qmp.DialAgent(ctx, path)
		return err
	})
	return a, err
}

func retryEAGAIN(ctx context.Context, f func() error) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		err := f()
		if !errors.Is(err, syscall.EAGAIN) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-tick.C:
		}
	}
}

// powerdown presses the ACPI power button over QMP and expects the guest's
// poweroff marker, QEMU's SHUTDOWN event and exit status 0.
func (vm *guestVM) powerdown(t *testing.T) {
	t.Helper()
	vm.marker(t, bootTimeout, testguest.KindReady) // acpid is armed before ready
	ctx := stepCtx(t)
	sub := vm.m.Subscribe(qmp.WithFilter(qmp.AnyOf("POWERDOWN", "SHUTDOWN")))
	defer sub.Close()
	if err := vm.m.SystemPowerdown(ctx); err != nil {
		t.Fatalf("system_powerdown: %v", err)
	}
	if e, err := sub.Next(ctx); err != nil || e.Name != "POWERDOWN" {
		t.Errorf("after system_powerdown: %+v, %v; want POWERDOWN", e, err)
	}
	vm.marker(t, stepTimeout, testguest.KindPoweroff, "source", "acpi")
	e, err := sub.Next(ctx)
	if err != nil || e.Name != "SHUTDOWN" || e.String("guest") != "true" || e.String("reason") != "guest-shutdown" {
		t.Errorf("after poweroff: %+v, %v; want SHUTDOWN guest=true reason=guest-shutdown", e, err)
	}
	if err := vm.waitExit(stepTimeout); err != nil {
		t.Errorf("QEMU exit after poweroff: %v", err)
	}
	select {
	case <-vm.m.Done():
	case <-time.After(5 * time.Second):
		t.Errorf("monitor not done 5 s after QEMU exited")
	}
	wantClosed(t, "the monitor after QEMU exited", vm.m.Err())
}

// execOut runs a command in the guest with its output captured and waits
// for it to exit.
func execOut(t *testing.T, ctx context.Context, a *qmp.Agent, path string, args []string, input []byte) qmp.ExecStatus {
	t.Helper()
	st, err := a.Run(ctx, path, args, input)
	if err != nil {
		t.Fatalf("guest-exec %s %v: %v", path, args, err)
	}
	return st
}

func TestQEMUAgent(t *testing.T) {
	t.Parallel()
	vm := startGuest(t)

	// The agent is not up yet: the sync is held and answered once it is.
	bootCtx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	a := vm.dialAgent(t, bootCtx)
	t.Logf("DialAgent synced %s after cont", time.Since(vm.resumed).Round(time.Millisecond))
	vm.marker(t, stepTimeout, testguest.KindAgent, "status", "started")

	ctx := stepCtx(t)
	if err := a.Ping(ctx); err != nil {
		t.Fatalf("guest-ping: %v", err)
	}
	info, err := a.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Version == "" || !slices.ContainsFunc(info.SupportedCommands, func(c struct {
		Name            string `json:"name"`
		Enabled         bool   `json:"enabled"`
		SuccessResponse bool   `json:"success-response"`
	}) bool {
		return c.Name == "guest-exec" && c.Enabled
	}) {
		t.Errorf("guest-info: version %q, %d commands (guest-exec missing?)", info.Version, len(info.SupportedCommands))
	}
	t.Logf("qemu-ga %s, %d commands", info.Version, len(info.SupportedCommands))

	osi, err := a.OSInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if osi.ID != "kemu-testguest" || osi.KernelRelease != vm.art.KernelVersion || osi.Machine != "x86_64" {
		t.Errorf("guest-get-osinfo = %+v, want id kemu-testguest, kernel %s", osi, vm.art.KernelVersion)
	}

	ifaces, err := a.NetworkInterfaces(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(ifaces, func(n qmp.GuestNetworkInterface) bool { return n.Name == "lo" })
	if i < 0 || !slices.ContainsFunc(ifaces[i].IPAddresses, func(ip qmp.GuestIPAddress) bool {
		return ip.Address == "127.0.0.1" && ip.Prefix == 8 && ip.Type == "ipv4"
	}) {
		t.Errorf("guest-network-get-interfaces = %+v, want lo with 127.0.0.1/8", ifaces)
	}

	st := execOut(t, ctx, a, "/bin/echo", []string{"hi"}, nil)
	if st.ExitCode != 0 || string(st.Stdout) != "hi\n" || len(st.Stderr) != 0 {
		t.Errorf("echo hi: %+v, stdout %q", st, st.Stdout)
	}
	st = execOut(t, ctx, a, "/bin/sh", []string{"-c", "cat; echo oops >&2; exit 3"}, []byte("from stdin\n"))
	if st.ExitCode != 3 || string(st.Stdout) != "from stdin\n" || string(st.Stderr) != "oops\n" {
		t.Errorf("sh -c ...: exit %d, stdout %q, stderr %q", st.ExitCode, st.Stdout, st.Stderr)
	}

	// Error replies are *qmp.Error; the connection goes on.
	err = a.Execute(ctx, "no-such-command", nil, nil)
	if !qmp.IsCommandNotFound(err) {
		t.Errorf("unknown agent command: %v, want CommandNotFound", err)
	}
	if _, err := a.Exec(ctx, "/no/such/binary", nil, nil, false); err != nil {
		t.Logf("guest-exec of a missing binary: %v", err)
	}
	var qe *qmp.Error
	if _, err := a.ExecStatus(ctx, 999999); !errors.As(err, &qe) {
		t.Errorf("guest-exec-status of an unknown pid: %v, want a *qmp.Error", err)
	}
	// A command abandoned by its context: the next one resynchronises.
	canceled, cancelNow := context.WithCancel(ctx)
	cancelNow()
	if err := a.Ping(canceled); err == nil {
		t.Errorf("ping with a canceled context succeeded")
	}
	if err := a.Ping(ctx); err != nil {
		t.Errorf("ping after a canceled one: %v", err)
	}
	if err := a.Sync(ctx); err != nil {
		t.Errorf("Sync: %v", err)
	}
	a.Close()
	if err := a.Ping(ctx); !errors.Is(err, qmp.ErrClosed) {
		t.Errorf("ping after Close: %v, want ErrClosed", err)
	}

	// A client that sent a command and left without reading the reply: the
	// next client is not confused by what it left behind.
	for _, stale := range []string{
		`{"execute":"guest-info"}`,
		`{"execute":"guest-get-osinfo","id":"kemu-2"}`,
		`{"execute":"guest-sync-delimited","arguments":{"id":12345}}`,
	} {
		rawSendAndLeave(t, ctx, vm.qga, stale)
		b, err := dialAgentRetry(ctx, vm.qga)
		if err != nil {
			t.Fatalf("after a client left %s: DialAgent: %v", stale, err)
		}
		if err := b.Ping(ctx); err != nil {
			t.Errorf("after a client left %s: ping: %v", stale, err)
		}
		if info, err := b.Info(ctx); err != nil || info.Version == "" {
			t.Errorf("after a client left %s: guest-info: %+v, %v", stale, info.Version, err)
		}
		b.Close()
	}

	// Replies that really reach the next client: qemu-ga is held 3 s in
	// guest-set-time (which waits for /sbin/hwclock, replaced by a sleep), so
	// the replies to the first client's commands arrive after the second
	// client connected, before the answer to its sync.
	c := vm.dialAgent(t, ctx)
	slowHWClock(t, ctx, c)
	c.Close()
	start := time.Now()
	rawSendAndLeave(t, ctx, vm.qga, `{"execute":"guest-set-time"}`+"\n"+`{"execute":"guest-get-osinfo"}`+"\n"+
		`{"execute":"guest-info","id":"other-client-7"}`+"\n"+`{"execute":"guest-sync-delimited","arguments":{"id":12345}}`)
	d := vm.dialAgent(t, ctx)
	if time.Since(start) < 2*time.Second {
		t.Errorf("DialAgent returned after %s, before qemu-ga was released (~3 s)", time.Since(start))
	}
	if err := d.Ping(ctx); err != nil {
		t.Errorf("ping after stale replies: %v", err)
	}
	if osi, err := d.OSInfo(ctx); err != nil || osi.ID != "kemu-testguest" {
		t.Errorf("osinfo after stale replies: %+v, %v", osi, err)
	}
	if info, err := d.Info(ctx); err != nil || info.Version == "" {
		t.Errorf("guest-info after stale replies: %q, %v", info.Version, err)
	}
	t.Logf("second client in sync %s after the first left (qemu-ga held ~3 s)", time.Since(start).Round(time.Millisecond))
	d.Close()

	vm.powerdown(t)
}

// TestQEMUAgentStaleStream: what a previous client may leave in the
// agent's stream must not confuse the next one.
func TestQEMUAgentStaleStream(t *testing.T) {
	t.Parallel()
	vm := startGuest(t)
	bootCtx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	a := vm.dialAgent(t, bootCtx)
	ctx := stepCtx(t)
	slowHWClock(t, ctx, a)
	a.Close()

	// A client killed in the middle of writing a command leaves qemu-ga's
	// JSON parser inside an object: whatever follows is swallowed until a
	// 0xFF byte resets it. qemu-ga's documentation of guest-sync-delimited
	// tells clients to send 0xFF first; Agent.sync does not, so DialAgent
	// waits until its context ends.
	t.Run("partial command", func(t *testing.T) {
		rawSendAndLeave(t, ctx, vm.qga, `{"execute":"guest-ping","arguments":{`)
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		b, err := dialAgentRetry(dctx, vm.qga)
		if err != nil {
			t.Errorf("DialAgent after a client left a partial command: %v", err)
			rawSendAndLeave(t, ctx, vm.qga, "\xff\n") // reset the parser for what follows
			return
		}
		defer b.Close()
		if err := b.Ping(ctx); err != nil {
			t.Errorf("ping: %v", err)
		}
	})

	// Stale replies carrying ids this client will use too ("kemu-1",
	// "kemu-2": an earlier kemu process, or any client with the same id
	// scheme). Agent.sync's token check (accept) only runs for replies
	// without an id: the stale "kemu-1" reply is taken as the answer to
	// DialAgent's guest-sync-delimited, the real answer is dropped later, and
	// the stale "kemu-2" reply is returned for the next command.
	t.Run("stale replies with our ids", func(t *testing.T) {
		rawSendAndLeave(t, ctx, vm.qga,
			`{"execute":"guest-set-time","id":"kemu-1"}`+"\n"+`{"execute":"guest-set-time","id":"kemu-2"}`)
		b := vm.dialAgent(t, ctx) // sync "kemu-1" must skip the stale "kemu-1" reply
		info, err := b.Info(ctx)  // "kemu-2"
		if err != nil || info.Version == "" {
			t.Errorf("guest-info after stale replies with our ids: version %q, %v", info.Version, err)
		}
		if err := b.Ping(ctx); err != nil {
			t.Errorf("ping: %v", err)
		}
		b.Close()
	})

	vm.powerdown(t)
}

// slowHWClock replaces the guest's /sbin/hwclock with a 3 s sleep: qemu-ga's
// guest-set-time waits for it, which holds the agent for 3 s.
func slowHWClock(t *testing.T, ctx context.Context, a *qmp.Agent) {
	t.Helper()
	st := execOut(t, ctx, a, "/bin/sh", []string{"-c",
		`rm -f /sbin/hwclock && printf '#!/bin/sh\nsleep 3\n' > /sbin/hwclock && chmod +x /sbin/hwclock && echo ok`}, nil)
	if st.ExitCode != 0 || string(st.Stdout) != "ok\n" {
		t.Fatalf("replacing /sbin/hwclock: exit %d, %q %q", st.ExitCode, st.Stdout, st.Stderr)
	}
}

// rawSendAndLeave connects to the agent socket, writes msg and leaves at
// once, without reading anything.
func rawSendAndLeave(t *testing.T, ctx context.Context, path, msg string) {
	t.Helper()
	var c net.Conn
	err := retryEAGAIN(ctx, func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, "unix", path)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetWriteDeadline(dl)
	}
	if _, err := fmt.Fprint(c, msg); err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(msg, "}") {
		if _, err := c.Write([]byte("\n")); err != nil {
			t.Fatal(err)
		}
	}
}
