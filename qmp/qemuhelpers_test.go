//go:build qemu

// Shared fixtures for the tests and benchmarks that run a real QEMU (TCG).
// Run them with `go test -tags qemu ./qmp/`; the guest agent tests need the
// test guest (`bash hack/testguest/build.sh`).
package qmp_test

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kemu-dev/kemu/test/testguest"

	"github.com/kemu-dev/kemu/qmp"
)

const (
	// startTimeout bounds QEMU's start until its QMP socket answers.
	startTimeout = 30 * time.Second
	// stepTimeout bounds one step of a test (a command, an event).
	stepTimeout = 30 * time.Second
	// bootTimeout bounds a test guest's boot under TCG (parallel boots on 2
	// cores take ~8–17 s).
	bootTimeout = 90 * time.Second
)

// qemuProc is a QEMU process started by a test, killed at cleanup.
type qemuProc struct {
	t       testing.TB
	dir     string
	args    []string
	cmd     *exec.Cmd
	out     *testguest.SyncBuffer
	exited  chan struct{}
	exitErr error
}

// shortDir is a temporary directory with a short path (unix socket paths
// are limited to 108 bytes).
func shortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kq-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// startQEMU starts a paused (-S) q35 machine without devices, with two QMP
// sockets (qmpPath and qmp2Path), plus extra arguments.
func startQEMU(t testing.TB, extra ...string) *qemuProc {
	t.Helper()
	dir := shortDir(t)
	args := []string{
		"-machine", "q35,accel=tcg", "-nodefaults", "-no-user-config", "-display", "none",
		"-S", "-m", "64",
		"-qmp", "unix:" + filepath.Join(dir, "q.sock") + ",server=on,wait=off",
		"-qmp", "unix:" + filepath.Join(dir, "q2.sock") + ",server=on,wait=off",
	}
	return startQEMUArgs(t, dir, append(args, extra...))
}

func startQEMUArgs(t testing.TB, dir string, args []string) *qemuProc {
	t.Helper()
	p := &qemuProc{t: t, dir: dir, args: args, out: &testguest.SyncBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command("qemu-system-x86_64", args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting QEMU: %v", err)
	}
	go func() {
		p.exitErr = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("QEMU %s\nexit: %v\noutput:\n%s", strings.Join(args, " "), p.exitErr, p.out.String())
		}
	})
	return p
}

func (p *qemuProc) qmpPath() string  { return filepath.Join(p.dir, "q.sock") }
func (p *qemuProc) qmp2Path() string { return filepath.Join(p.dir, "q2.sock") }

// kill sends SIGKILL (if still running) and waits for the exit.
func (p *qemuProc) kill() {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
	}
}

// waitExit waits up to d for QEMU to exit and returns its exit error.
func (p *qemuProc) waitExit(d time.Duration) error {
	p.t.Helper()
	select {
	case <-p.exited:
		return p.exitErr
	case <-time.After(d):
		p.t.Fatalf("QEMU still running after %s", d)
		return nil
	}
}

// dialUnix connects to a socket QEMU creates, retrying until ctx ends or
// QEMU exits.
func (p *qemuProc) dialUnix(ctx context.Context, path string) (net.Conn, error) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", path)
		if err == nil {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return nil, errors.Join(ctx.Err(), err)
		case <-p.exited:
			return nil, errors.New("QEMU exited: " + p.out.String())
		case <-tick.C:
		}
	}
}

// monitor connects a Monitor to the QMP socket at path with qmp.Dial
// (retrying until QEMU listens) and closes it at cleanup.
func (p *qemuProc) monitor(path string, opts ...qmp.Option) *qmp.Monitor {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		m, err := qmp.Dial(ctx, path, opts...)
		if err == nil {
			p.t.Cleanup(func() { m.Close() })
			return m
		}
		select {
		case <-ctx.Done():
			p.t.Fatalf("qmp.Dial %s: %v", path, err)
		case <-p.exited:
			p.t.Fatalf("qmp.Dial %s: %v; QEMU exited: %s", path, err, p.out.String())
		case <-tick.C:
		}
	}
}

// hookMonitor connects a hookConn to the QMP socket at path, wraps it with
// qmp.New and negotiates capabilities; closed at cleanup.
func (p *qemuProc) hookMonitor(path string) (*qmp.Monitor, *hookConn) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c, err := p.dialUnix(ctx, path)
	if err != nil {
		p.t.Fatalf("QMP socket %s: %v", path, err)
	}
	hc := &hookConn{Conn: c}
	m := qmp.New(hc)
	if err := m.ConnectContext(ctx); err != nil {
		p.t.Fatalf("QMP connect: %v", err)
	}
	p.t.Cleanup(func() { m.Close() })
	return m, hc
}

// hookConn is a net.Conn whose writes, write deadlines and reads can be
// observed or delayed by a test, to force an interleaving.
type hookConn struct {
	net.Conn
	mu sync.Mutex
	// onWrite runs before each write with the bytes to be written.
	onWrite func(b []byte)
	// onSetWriteDeadline wraps each SetWriteDeadline; set applies it.
	onSetWriteDeadline func(d time.Time, set func() error) error
	// afterRead runs after each read of the underlying connection returned.
	afterRead func(n int, err error)
}

func (h *hookConn) hooks() (func([]byte), func(time.Time, func() error) error, func(int, error)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.onWrite, h.onSetWriteDeadline, h.afterRead
}

func (h *hookConn) set(f func(h *hookConn)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f(h)
}

func (h *hookConn) Write(b []byte) (int, error) {
	if f, _, _ := h.hooks(); f != nil {
		f(b)
	}
	return h.Conn.Write(b)
}

func (h *hookConn) SetWriteDeadline(d time.Time) error {
	if _, f, _ := h.hooks(); f != nil {
		return f(d, func() error { return h.Conn.SetWriteDeadline(d) })
	}
	return h.Conn.SetWriteDeadline(d)
}

func (h *hookConn) Read(b []byte) (int, error) {
	n, err := h.Conn.Read(b)
	if _, _, f := h.hooks(); f != nil {
		f(n, err)
	}
	return n, err
}

func stepCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	t.Cleanup(cancel)
	return ctx
}

// wantClosed fails unless err is non-nil and wraps qmp.ErrClosed.
func wantClosed(t testing.TB, what string, err error) {
	t.Helper()
	if err == nil || !errors.Is(err, qmp.ErrClosed) {
		t.Errorf("%s: got %v (%T), want an error wrapping qmp.ErrClosed", what, err, err)
	}
}

// binaryVersion is the version of the QEMU the tests start.
func binaryVersion(t testing.TB) string {
	t.Helper()
	v, err := testguest.QEMUVersion()
	if err != nil {
		t.Fatal(err)
	}
	return v
}
