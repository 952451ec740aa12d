package cmdserver_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/kemu-dev/kemu/api/launcherpod"
	"github.com/kemu-dev/kemu/launcher/cmdserver"
	"github.com/kemu-dev/kemu/launcher/rpc"
	"github.com/kemu-dev/kemu/test/testguest"
)

const rpcTimeout = 30 * time.Second

func shortDir(t testing.TB) string {
	t.Helper()
	return testguest.TempDir(t, "kemu-cs-") // QEMU (uid 107) must traverse it
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func startServer(t testing.TB, opts cmdserver.Options) *cmdserver.Server {
	t.Helper()
	s := cmdserver.New(opts)
	if err := s.Start(ctxFor(t, rpcTimeout)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

func dial(t testing.TB, socket string) (rpc.LauncherClient, *grpc.ClientConn) {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rpc.NewLauncherClient(conn), conn
}

func wantCode(t testing.TB, err error, code codes.Code, contains ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("got %v (%v), want %v", status.Code(err), err, code)
	}
	for _, c := range contains {
		if !strings.Contains(err.Error(), c) {
			t.Errorf("error %q does not mention %q", err, c)
		}
	}
}

// inotifyNames returns "EVENT name" for each queued event.
func inotifyNames(t testing.TB, fd int) []string {
	t.Helper()
	buf := make([]byte, 64<<10)
	var out []string
	for {
		n, err := syscall.Read(fd, buf)
		if err == syscall.EAGAIN || n <= 0 {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off+syscall.SizeofInotifyEvent <= n; {
			mask := binary.LittleEndian.Uint32(buf[off+4:])
			l := int(binary.LittleEndian.Uint32(buf[off+12:]))
			name := string(bytes.TrimRight(buf[off+syscall.SizeofInotifyEvent:off+syscall.SizeofInotifyEvent+l], "\x00"))
			kind := "OTHER"
			switch {
			case mask&syscall.IN_CREATE != 0:
				kind = "CREATE"
			case mask&syscall.IN_MOVED_FROM != 0:
				kind = "MOVED_FROM"
			case mask&syscall.IN_MOVED_TO != 0:
				kind = "MOVED_TO"
			}
			out = append(out, kind+" "+name)
			off += syscall.SizeofInotifyEvent + l
		}
	}
}

// The socket appears as launcher-init.sock and is renamed to launcher.sock
// once the server answers; mode 0600; stale sockets are replaced.
func TestReadinessRenameAndStaleSocket(t *testing.T) {
	dir := filepath.Join(shortDir(t), "sockets")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// Stale sockets of a crashed launcher: bound, nobody listening.
	for _, name := range []string{launcherpod.InitSocket, launcherpod.Socket} {
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, name), Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		l.SetUnlinkOnClose(false)
		l.Close()
	}
	fd, err := syscall.InotifyInit1(syscall.IN_NONBLOCK | syscall.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if _, err := syscall.InotifyAddWatch(fd, dir, syscall.IN_CREATE|syscall.IN_MOVED_FROM|syscall.IN_MOVED_TO); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, cmdserver.Options{SocketsDir: dir})
	got := strings.Join(inotifyNames(t, fd), ", ")
	want := "CREATE launcher-init.sock, MOVED_FROM launcher-init.sock, MOVED_TO launcher.sock"
	if got != want {
		t.Errorf("socket events: %s, want %s", got, want)
	}
	st, err := os.Stat(s.Socket())
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want a socket with 0600", st.Mode())
	}
	if _, err := os.Stat(filepath.Join(dir, launcherpod.InitSocket)); !os.IsNotExist(err) {
		t.Errorf("launcher-init.sock still there: %v", err)
	}
	c, _ := dial(t, s.Socket())
	ctx := ctxFor(t, rpcTimeout)
	if r, err := c.Ping(ctx, &rpc.PingRequest{}); err != nil || r.Status != "ok" {
		t.Fatalf("ping: %v %v", r, err)
	}
	info, err := c.Info(ctx, &rpc.InfoRequest{SupportedVersions: []string{"v0", "v1"}})
	if err != nil || info.Version != "v1" {
		t.Fatalf("info: %v %v", info, err)
	}
	_, err = c.Info(ctx, &rpc.InfoRequest{SupportedVersions: []string{"v9"}})
	wantCode(t, err, codes.FailedPrecondition, "v1")
	s.Stop()
	if _, err := os.Stat(s.Socket()); !os.IsNotExist(err) {
		t.Errorf("socket left after Stop: %v", err)
	}
}

// Before any Sync; bad input of every kind; the server keeps answering.
func TestBadInput(t *testing.T) {
	s := startServer(t, cmdserver.Options{SocketsDir: shortDir(t)})
	c, conn := dial(t, s.Socket())
	ctx := ctxFor(t, rpcTimeout)
	alive := func() {
		t.Helper()
		if _, err := c.Ping(ctx, &rpc.PingRequest{}); err != nil {
			t.Fatalf("server not answering: %v", err)
		}
	}

	_, err := c.GetDomain(ctx, &rpc.Empty{})
	wantCode(t, err, codes.FailedPrecondition, "Sync first")
	_, err = c.Pause(ctx, &rpc.Empty{})
	wantCode(t, err, codes.FailedPrecondition)
	_, err = c.Qmp(ctx, &rpc.QmpRequest{CommandJson: `{"execute":"query-status"}`})
	wantCode(t, err, codes.FailedPrecondition)
	_, err = c.GuestUsers(ctx, &rpc.Empty{})
	wantCode(t, err, codes.FailedPrecondition, "guest-get-users", "Sync first")
	_, err = c.GuestFilesystems(ctx, &rpc.Empty{})
	wantCode(t, err, codes.FailedPrecondition, "guest-get-fsinfo", "Sync first")
	vs, err := c.Vnc(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = vs.Recv()
	wantCode(t, err, codes.FailedPrecondition, "vnc", "Sync first")

	_, err = c.Sync(ctx, &rpc.SyncRequest{VmiJson: []byte(`{"apiVersion": "kemu.dev/v1alpha1", "kind": `)})
	wantCode(t, err, codes.InvalidArgument, "malformed")
	_, err = c.Sync(ctx, &rpc.SyncRequest{})
	wantCode(t, err, codes.InvalidArgument, "empty")
	_, err = c.Sync(ctx, &rpc.SyncRequest{VmiJson: []byte(`{"apiVersion": "kemu.dev/v1alpha1", "kind": "VirtualMachineInstance",
		"metadata": {"name": "bad"},
		"spec": {"domain": {"memory": {"guest": "64Mi"}, "bogus": 1,
		  "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]}}}}`)})
	wantCode(t, err, codes.InvalidArgument, "spec.domain.bogus", "spec.domain.devices.disks[0]")
	alive()

	// The migration RPCs need a VM (and PrepareMigrationTarget a VMI).
	for _, m := range []string{"Migrate", "CancelMigration", "FinalizeMigration"} {
		err := conn.Invoke(ctx, "/kemu.launcher.v1.Launcher/"+m, &rpc.Empty{}, &rpc.Empty{})
		wantCode(t, err, codes.FailedPrecondition, "no VM yet")
	}
	_, err = c.PrepareMigrationTarget(ctx, &rpc.SyncRequest{})
	wantCode(t, err, codes.InvalidArgument, "empty")
	err = conn.Invoke(ctx, "/kemu.launcher.v1.Launcher/NoSuchMethod", &rpc.Empty{}, &rpc.Empty{})
	wantCode(t, err, codes.Unimplemented)
	err = conn.Invoke(ctx, "/no.such.Service/Ping", &rpc.Empty{}, &rpc.Empty{})
	wantCode(t, err, codes.Unimplemented)
	alive()

	huge := bytes.Repeat([]byte("x"), 32<<20)
	_, err = c.Sync(ctx, &rpc.SyncRequest{VmiJson: huge})
	wantCode(t, err, codes.ResourceExhausted)
	alive()

	// A watcher (waiting for the VM) and a console that go away.
	wctx, cancel := context.WithCancel(ctx)
	ws, err := c.WatchDomain(wctx, &rpc.WatchRequest{QmpEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := ws.Recv(); status.Code(err) != codes.Canceled {
		t.Errorf("watch after cancel: %v", err)
	}
	cs, err := c.Console(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = cs.Recv()
	wantCode(t, err, codes.FailedPrecondition)
	alive()
}

// A standard gRPC client that is not ours lists the services through
// reflection and calls Ping.
func TestGrpcurl(t *testing.T) {
	root, err := testguest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "_out/tools/bin/grpcurl")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("grpcurl not installed (bash hack/install-deps.sh): %v", err)
	}
	s := startServer(t, cmdserver.Options{SocketsDir: shortDir(t)})
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctxFor(t, rpcTimeout), bin, append([]string{"-plaintext", "-unix"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("grpcurl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := run(s.Socket(), "list"); !strings.Contains(out, "kemu.launcher.v1.Launcher") {
		t.Errorf("grpcurl list:\n%s", out)
	}
	if out := run(s.Socket(), "describe", "kemu.launcher.v1.Launcher"); !strings.Contains(out, "rpc WatchDomain") {
		t.Errorf("grpcurl describe:\n%s", out)
	}
	if out := run(s.Socket(), "kemu.launcher.v1.Launcher/Ping"); !strings.Contains(out, `"status": "ok"`) {
		t.Errorf("grpcurl Ping:\n%s", out)
	}
}
