package launcherclient

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kemu-dev/kemu/api/launcherpod"
	"github.com/kemu-dev/kemu/devices/cgroup"
	"github.com/kemu-dev/kemu/launcher/rpc"
)

// The test binary doubles as the processes on the other side:
//
//	KEMU_LC_HELPER=serve DIR VMI_UID TOTAL BREAK_EVERY: a fake launcher
//	  listening on DIR/launcher.sock (any path length), printing "ready",
//	  then "accept" per connection and "rpc METHOD" (and "from N" for
//	  WatchDomain) per call; WatchDomain streams domains 1..TOTAL, breaking
//	  the stream after every BREAK_EVERY.
//	KEMU_LC_HELPER=dial KUBELET_ROOT POD_UID VMI_UID: Dial, print "ok" or
//	  "refused REASON: MESSAGE" or "error: ...".
//
// Tests start them straight into real cgroup v2 cgroups (CLONE_INTO_CGROUP)
// named as the kubelet names Pod cgroups.
func TestMain(m *testing.M) {
	switch os.Getenv("KEMU_LC_HELPER") {
	case "serve":
		os.Exit(helperServe(os.Args[1:]))
	case "dial":
		os.Exit(helperDial(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// fakeLauncher streams domains 1..total, breaking the stream after every
// breakEvery events.
type fakeLauncher struct {
	rpc.UnimplementedLauncherServer
	vmiUID            string
	total, breakEvery int64
}

func (f *fakeLauncher) Info(context.Context, *rpc.InfoRequest) (*rpc.InfoResponse, error) {
	return &rpc.InfoResponse{Version: "v1", LauncherVersion: "fake", VmiUid: f.vmiUID}, nil
}

func (f *fakeLauncher) Pause(context.Context, *rpc.Empty) (*rpc.Empty, error) {
	return &rpc.Empty{}, nil
}

func (f *fakeLauncher) WatchDomain(req *rpc.WatchRequest, s grpc.ServerStreamingServer[rpc.WatchEvent]) error {
	fmt.Printf("from %d\n", req.GetFromSeq())
	seq := max(req.GetFromSeq(), 1)
	for sent := int64(0); seq <= f.total; seq++ {
		if sent == f.breakEvery {
			return status.Error(codes.Unavailable, "broken on purpose")
		}
		state := rpc.DomainState_Running
		if seq == f.total {
			state = rpc.DomainState_Shutoff
		}
		if err := s.Send(&rpc.WatchEvent{Event: &rpc.WatchEvent_Domain{Domain: &rpc.Domain{Seq: seq, State: state}}}); err != nil {
			return err
		}
		sent++
	}
	return nil
}

// printingListener prints "accept" for each connection.
type printingListener struct{ net.Listener }

func (l printingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		fmt.Println("accept")
	}
	return c, err
}

func helperServe(args []string) int {
	if len(args) != 4 {
		fmt.Fprintln(os.Stderr, "serve DIR VMI_UID TOTAL BREAK_EVERY")
		return 2
	}
	total, _ := strconv.ParseInt(args[2], 10, 64)
	breakEvery, _ := strconv.ParseInt(args[3], 10, 64)
	dir, err := unix.Open(args[0], unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	lis, err := net.Listen("unix", fmt.Sprintf("/proc/self/fd/%d/%s", dir, launcherpod.Socket))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	g := grpc.NewServer(
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			fmt.Println("rpc", info.FullMethod)
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			fmt.Println("rpc", info.FullMethod)
			return h(srv, ss)
		}))
	rpc.RegisterLauncherServer(g, &fakeLauncher{vmiUID: args[1], total: total, breakEvery: breakEvery})
	fmt.Println("ready")
	_ = g.Serve(printingListener{lis})
	return 0
}

func helperDial(args []string) int {
	if len(args) != 3 {
		fmt.Fprintln(os.Stderr, "dial KUBELET_ROOT POD_UID VMI_UID")
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, _, err := Dial(ctx, Target{KubeletRoot: args[0], PodUID: types.UID(args[1]), VMIUID: types.UID(args[2])})
	var ue *UnverifiedError
	switch {
	case errors.As(err, &ue):
		fmt.Printf("refused %s: %v\n", ue.Reason, ue)
	case err != nil:
		fmt.Printf("error: %v\n", err)
	default:
		c.Close()
		fmt.Println("ok")
	}
	return 0
}

// syncBuffer collects a helper's output.
type syncBuffer struct {
	mu    sync.Mutex
	lines []string
}

func (b *syncBuffer) add(l string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lines = append(b.lines, l)
}

func (b *syncBuffer) get() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.lines...)
}

// helper is a fake launcher process.
type helper struct {
	cmd    *exec.Cmd
	out    *syncBuffer
	done   chan struct{}
	socket string
}

// lines returns the helper's output lines starting with prefix.
func (h *helper) lines(prefix string) []string {
	var out []string
	for _, l := range h.out.get() {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}

// waitLines waits until the helper printed n lines starting with prefix
// (its output is read asynchronously) and returns them; at most 10 s.
func (h *helper) waitLines(prefix string, n int) []string {
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := h.lines(prefix)
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (h *helper) kill() {
	_ = h.cmd.Process.Kill()
	<-h.done
}

// needRoot fails the test without root or a cgroup2 hierarchy.
func needRoot(t *testing.T) *cgroup.Hierarchy {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root to make cgroups and Pod directories (make test runs as root)")
	}
	h, err := cgroup.Self()
	if err != nil {
		t.Fatalf("these tests need a cgroup2 hierarchy: %v", err)
	}
	return h
}

// cgroups makes real cgroup v2 directories for one test under the test
// process's cgroup and removes them (bottom up) when the test ends.
type cgroups struct {
	t    *testing.T
	base string
}

func newCgroups(t *testing.T) *cgroups {
	h := needRoot(t)
	base, err := os.MkdirTemp(h.Dir, "kemu-lctest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var dirs []string
		_ = filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			for i := len(dirs) - 1; i >= 0; i-- {
				if err := unix.Rmdir(dirs[i]); err != nil && !errors.Is(err, unix.ENOENT) {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Errorf("removing test cgroups under %s: %v", base, err)
		}
	})
	return &cgroups{t: t, base: base}
}

// pod makes a Pod's container cgroup as the kubelet's cgroupfs driver
// (kubepods/burstable/pod<uid>/<container>) or systemd driver
// (kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice/cri-containerd-<id>.scope)
// names it.
func (c *cgroups) pod(uid types.UID, systemd bool) string {
	p := filepath.Join(c.base, "kubepods", "burstable", "pod"+string(uid), "c0ffee")
	if systemd {
		u := strings.ReplaceAll(string(uid), "-", "_")
		p = filepath.Join(c.base, "kubepods.slice", "kubepods-burstable.slice", "kubepods-burstable-pod"+u+".slice", "cri-containerd-c0ffee.scope")
	}
	return c.dir(p)
}

// plain makes a cgroup that is no Pod's.
func (c *cgroups) plain(name string) string {
	return c.dir(filepath.Join(c.base, "system.slice", name))
}

func (c *cgroups) dir(p string) string {
	if err := os.MkdirAll(p, 0o755); err != nil {
		c.t.Fatal(err)
	}
	return p
}

// start runs the test binary as a helper inside cgroupDir (clone3
// CLONE_INTO_CGROUP), with extra clone flags.
func start(t *testing.T, cgroupDir string, cloneflags uintptr, args ...string) (*exec.Cmd, *syncBuffer, chan struct{}) {
	t.Helper()
	fd, err := unix.Open(cgroupDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	cmd := exec.Command(os.Args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "KEMU_LC_HELPER="+args[0])
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd, Cloneflags: cloneflags}
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting a helper in %s: %v", cgroupDir, err)
	}
	out, done := &syncBuffer{}, make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			out.add(sc.Text())
		}
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
	}()
	return cmd, out, done
}

// serveIn starts a fake launcher in cgroupDir listening in socketsDir
// (created) and waits until it listens.
func serveIn(t *testing.T, cgroupDir, socketsDir, vmiUID string, total, breakEvery int) *helper {
	t.Helper()
	if err := os.MkdirAll(socketsDir, 0o750); err != nil {
		t.Fatal(err)
	}
	cmd, out, done := start(t, cgroupDir, 0, "serve", socketsDir, vmiUID, fmt.Sprint(total), fmt.Sprint(breakEvery))
	h := &helper{cmd: cmd, out: out, done: done, socket: filepath.Join(socketsDir, launcherpod.Socket)}
	t.Cleanup(h.kill)
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		select {
		case <-done:
			return false, errors.New("the helper exited")
		default:
		}
		return len(h.lines("ready")) > 0, nil
	})
	if err != nil {
		t.Fatalf("fake launcher in %s: %v", socketsDir, err)
	}
	return h
}

// pod is a Pod under a test kubelet root (the sockets directory's host
// path is longer than a sockaddr_un holds, as under /var/lib/kubelet).
type pod struct {
	uid     types.UID
	vmiUID  types.UID
	sockets string
	target  Target
}

func newPod(t *testing.T, kubeletRoot string) *pod {
	uid, vmi := uuid.NewUUID(), uuid.NewUUID()
	p := &pod{uid: uid, vmiUID: vmi, sockets: SocketsDir(kubeletRoot, uid),
		target: Target{KubeletRoot: kubeletRoot, PodUID: uid, VMIUID: vmi}}
	if len(p.target.SocketPath()) <= 107 {
		t.Fatalf("%s is not longer than a sockaddr_un", p.target.SocketPath())
	}
	return p
}

// Each way of pointing the node agent elsewhere is refused before any RPC
// reaches a listener; the Pod's own launcher is accepted with its pid.
func TestVerify(t *testing.T) {
	type setup struct {
		target Target
		// watched must see no RPC; with noConnect, not even a connection.
		watched   []*helper
		noConnect bool
		// own is the launcher that should be accepted.
		own *helper
	}
	cases := []struct {
		name  string
		setup func(t *testing.T, cg *cgroups, kubeletRoot string) setup
		// want: the refusal's reason, "" for a verified launcher.
		want string
		// ready, alive: what Ready and Alive say ("unverified", "ok").
		ready, alive string
	}{
		{
			name: "the Pod's launcher (cgroupfs names)",
			setup: func(t *testing.T, cg *cgroups, root string) setup {
				p := newPod(t, root)
				h := serveIn(t, cg.pod(p.uid, false), p.sockets, string(p.vmiUID), 1, 1)
				return setup{target: p.target, own: h}
			},
			ready: "ok", alive: "ok",
		},
		{
			name: "the Pod's launcher (systemd names)",
			setup: func(t *testing.T, cg *cgroups, root string) setup {
				p := newPod(t, root)
				h := serveIn(t, cg.pod(p.uid, true), p.sockets, string(p.vmiUID), 1, 1)
				return setup{target: p.target, own: h}
			},
			ready: "ok", alive: "ok",
		},
		{
			name: "launcher.sock is a symlink to another Pod's launcher",
			setup: func(t *testing.T, cg *cgroups, root string) setup {
				a, b := newPod(t, root), newPod(t, root)
				victim := serveIn(t, cg.pod(b.uid, false), b.sockets, string(a.vmiUID), 1, 1)
				mkdirs(t, a.sockets)
				symlink(t, victim.socket, filepath.Join(a.sockets, launcherpod.Socket))
				return setup{target: a.target, watched: []*helper{victim}, noConnect: true}
			},
			want: ReasonSymlink, ready: "unverified", alive: "unverified",
		},
		{
			name: "launcher.sock is a relative symlink",
			setup: func(t *testing.T, cg *cgroups, root string) setup {
				a, b := newPod(t, root), newPod(t, root)
				victim := serveIn(t, cg.pod(b.uid, false), b.sockets, string(a.vmiUID), 1, 1)
				mkdirs(t, a.sockets)
				rel, err := filepath.Rel(a.sockets, victim.socket)
				if err != nil {
					t.Fatal(err)
				}
				symlink(t, rel, filepath.Join(a.sockets, launcherpod.Socket))
				return setup{target: a.target, watched: []*helper{victim}, noConnect: true}
			},
			want: ReasonSymlink, ready: "unverified", alive: "unverified",
		},
		{
			name: "the sockets directory is a symlink to another Pod's",
			setup: func(t *testing.T, cg *cgroups, root string) setup {
				a, b := newPod(t, root), newPod(t, root)
				victim := serveIn(t, cg.pod(b.uid, false), b.sockets, string(a.vmiUID), 1, 1)
				mkdirs(t, filepath.Dir(a.sockets))
				symlink(t, b.sockets, a.sockets)
				return setup{target: a.target, watched: []*helper{victim}, noConnect: true}
			},
			want: ReasonSymlink, ready: "unverified", alive: "unverified",
		},
		{
			name: "the Pod directory is a symlink to another Pod's",
			setup: func(t *testing.T, cg *cgroups, root string) setup {
				a, b := newPod(t, root), newPod(t, root)
				victim := serveIn(t, cg.pod(b.uid, false), b.sockets, string(a.vmiUID), 1, 1)
				symlink(t, string(b.uid), filepath.Join(root, "pods", string(a.uid)))
				return setup{target: a.target, watched: []*helper{victim}, noConnect: true}
			},
			want: ReasonSymlink, ready: "unverified", alive: "unverified",
		},
		{
			name: "launcher.sock is a regular file",
			setup: func(t *testing.T, _ *cgroups, root string) setup {
				a := newPod(t, root)
				mkdirs(t, a.sockets)
				if err := os.WriteFile(filepath.Join(a.sockets, launcherpod.Socket), []byte("x"), 0o600); err != nil {
					t.Fatal(err)
				}
				return setup{target: a.target}
			},
			want: ReasonNotASocket, ready: "unverified", alive: "unverified",
		},
		{
			name: "launcher.sock is a FIFO",
			setup: func(t *testing.T, _ *cgroups, root string) setup {
				a := newPod(t, root)
				mkdirs(t, a.sockets)
				if err := unix.Mkfifo(filepath.Join(a.sockets, launcherpod.Socket), 0o600); err != nil {
					t.Fatal(err)
				}
				return setup{target: a.target}
			},
			want: ReasonNotASocket, ready: "unverified", alive: "unverified",
		},
		{
			name: "the sockets directory is a regular file",
			setup: func(t *testing.T, _ *cgroups, root string) setup {
				a := newPod(t, root)
				mkdirs(t, filepath.Dir(a.sockets))
				if err := os.WriteFile(a.sockets, []byte("x"), 0o600); err != nil {
					t.Fatal(err)
				}
				return setup{target: a.target}
			},
			want: ReasonNotADirectory, ready: "unverified", alive: "unverified",
		},
		{
			name: "a listener in another Pod's cgroup",
			setup: func(t *testing.T, cg *cgroups, root string) setup {
				a, b := newPod(t, root), newPod(t, root)
				h := serveIn(t, cg.pod(b.uid, false), a.sockets, string(a.vmiUID), 1, 1)
				return setup{target: a.target, watched: []*helper{h}}
			},
			want: ReasonPeerOutsidePod, ready: "ok", alive: "unverified",
		},
		{
			name: "a listener in another Pod's cgroup (systemd names)",
			setup: func(t *testing.T, cg *cgroups, root string) setup {
				a, b := newPod(t, root), newPod(t, root)
				h := serveIn(t, cg.pod(b.uid, true), a.sockets, string(a.vmiUID), 1, 1)
				return setup{target: a.target, watched: []*helper{h}}
			},
			want: ReasonPeerOutsidePod, ready: "ok", alive: "unverified",
		},
		{
			name: "a listener in no Pod's cgroup",
			setup: func(t *testing.T, cg *cgroups, root string) setup {
				a := newPod(t, root)
				h := serveIn(t, cg.plain("sshd.service"), a.sockets, string(a.vmiUID), 1, 1)
				return setup{target: a.target, watched: []*helper{h}}
			},
			want: ReasonPeerOutsidePod, ready: "ok", alive: "unverified",
		},
		{
			name: "a listener in a cgroup named like the Pod's, inside another Pod's",
			setup: func(t *testing.T, cg *cgroups, root string) setup {
				a, b := newPod(t, root), newPod(t, root)
				nested := cg.dir(filepath.Join(cg.pod(b.uid, false), "pod"+string(a.uid)))
				h := serveIn(t, nested, a.sockets, string(a.vmiUID), 1, 1)
				return setup{target: a.target, watched: []*helper{h}}
			},
			want: ReasonPeerOutsidePod, ready: "ok", alive: "unverified",
		},
		{
			name: "the Pod's launcher runs another VMI",
			setup: func(t *testing.T, cg *cgroups, root string) setup {
				a := newPod(t, root)
				h := serveIn(t, cg.pod(a.uid, false), a.sockets, string(uuid.NewUUID()), 1, 1)
				return setup{target: a.target, own: h}
			},
			want: ReasonVMIUIDMismatch, ready: "ok", alive: "ok",
		},
		{
			name: "the Pod's launcher was started without --vmi-uid",
			setup: func(t *testing.T, cg *cgroups, root string) setup {
				a := newPod(t, root)
				h := serveIn(t, cg.pod(a.uid, false), a.sockets, "", 1, 1)
				return setup{target: a.target, own: h}
			},
			want: ReasonVMIUIDMismatch, ready: "ok", alive: "ok",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cg := newCgroups(t)
			s := tc.setup(t, cg, t.TempDir())
			ready, err := Ready(s.target)
			if got := outcome(ready, err); got != tc.ready {
				t.Errorf("Ready = %v, %v; want %s", ready, err, tc.ready)
			}
			if got := outcome(true, Alive(s.target)); got != tc.alive {
				t.Errorf("Alive = %v; want %s", Alive(s.target), tc.alive)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c, info, err := Dial(ctx, s.target)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Dial: %v", err)
				}
				defer c.Close()
				if c.PeerPID() != s.own.cmd.Process.Pid {
					t.Errorf("PeerPID %d, want the launcher's %d", c.PeerPID(), s.own.cmd.Process.Pid)
				}
				if info.GetVmiUid() != string(s.target.VMIUID) {
					t.Errorf("Info %v", info)
				}
				if _, err := c.Pause(ctx, &rpc.Empty{}); err != nil {
					t.Errorf("Pause on a verified launcher: %v", err)
				}
				if got := s.own.waitLines("rpc ", 2); len(got) != 2 {
					t.Errorf("the launcher saw %v, want Info and Pause", got)
				}
				return
			}
			var ue *UnverifiedError
			if !errors.As(err, &ue) || !errors.Is(err, ErrUnverified) || ue.Reason != tc.want {
				t.Fatalf("Dial = %v, want a refusal %s", err, tc.want)
			}
			t.Logf("refused: %v", err)
			if c != nil {
				t.Error("a client despite the refusal")
			}
			if s.own != nil {
				// Only Info went to the Pod's own (but wrong) launcher.
				if got := s.own.waitLines("rpc ", 1); len(got) != 1 || got[0] != "rpc /kemu.launcher.v1.Launcher/Info" {
					t.Errorf("the launcher saw %v, want only Info", got)
				}
			}
			for _, h := range s.watched {
				if got := h.lines("rpc "); len(got) > 0 {
					t.Errorf("RPCs reached %s: %v", h.socket, got)
				}
				if got := h.lines("accept"); s.noConnect && len(got) > 0 {
					t.Errorf("%d connections reached %s", len(got), h.socket)
				}
			}
		})
	}
}

func outcome(ok bool, err error) string {
	switch {
	case errors.Is(err, ErrUnverified):
		return "unverified"
	case err != nil:
		return "error: " + err.Error()
	case !ok:
		return "not ready"
	}
	return "ok"
}

func mkdirs(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o750); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// A node agent in a PID namespace that cannot see the launcher's
// (SO_PEERCRED pid 0) refuses it: it needs hostPID.
func TestVerifyPeerInvisiblePID(t *testing.T) {
	cg := newCgroups(t)
	root := t.TempDir()
	p := newPod(t, root)
	h := serveIn(t, cg.pod(p.uid, false), p.sockets, string(p.vmiUID), 1, 1)
	// The dialling side runs in a new PID namespace: the launcher, in the
	// parent namespace, has no pid there.
	cmd, out, done := start(t, cg.plain("agent"), unix.CLONE_NEWPID, "dial", root, string(p.uid), string(p.vmiUID))
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the dialling helper hung")
	}
	got := strings.Join(out.get(), "\n")
	if !strings.HasPrefix(got, "refused "+ReasonPeerNotVisible+":") || !strings.Contains(got, "hostPID") {
		t.Errorf("dial from another PID namespace: %q, want refused %s", got, ReasonPeerNotVisible)
	}
	if rpcs := h.lines("rpc "); len(rpcs) > 0 {
		t.Errorf("RPCs reached the launcher: %v", rpcs)
	}
	// The same Dial from here (the launcher's PID namespace) succeeds.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, _, err := Dial(ctx, p.target)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// Missing pieces are "not ready" (socket) or fs.ErrNotExist (directory),
// and the launcher is gone for Alive; an invalid Pod UID is an error.
func TestNotThere(t *testing.T) {
	needRoot(t)
	root := t.TempDir()
	p := newPod(t, root)
	if ok, err := Ready(p.target); ok || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Ready without the Pod directory = %v, %v", ok, err)
	}
	if err := Alive(p.target); !errors.Is(err, ErrGone) {
		t.Errorf("Alive without the Pod directory = %v", err)
	}
	mkdirs(t, p.sockets)
	if ok, err := Ready(p.target); ok || err != nil {
		t.Errorf("Ready without the socket = %v, %v; want not ready", ok, err)
	}
	if err := Alive(p.target); !errors.Is(err, ErrGone) {
		t.Errorf("Alive without the socket = %v", err)
	}
	// A socket nobody listens on any more: refused, gone.
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(shortDir(t), "x.sock"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	if err := os.Rename(l.Addr().String(), filepath.Join(p.sockets, launcherpod.Socket)); err != nil {
		t.Fatal(err)
	}
	if ok, err := Ready(p.target); !ok || err != nil {
		t.Errorf("Ready with a socket = %v, %v", ok, err)
	}
	if err := Alive(p.target); !errors.Is(err, ErrGone) {
		t.Errorf("Alive with nobody listening = %v", err)
	}
	for _, uid := range []types.UID{"", ".", "..", "a/b"} {
		if _, err := Ready(Target{KubeletRoot: root, PodUID: uid}); err == nil || errors.Is(err, ErrUnverified) {
			t.Errorf("Ready(pod %q) = %v", uid, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, _, err := Dial(ctx, Target{KubeletRoot: root, PodUID: p.uid}); err == nil {
		t.Error("Dial without a VMI UID")
	}
}

func shortDir(t *testing.T) string {
	d, err := os.MkdirTemp("", "lc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func TestCheckPodCgroup(t *testing.T) {
	const (
		uid   = "8a1f3c2e-5b6d-4e7f-9a0b-1c2d3e4f5a6b"
		other = "0f0e0d0c-0b0a-4090-8070-605040302010"
	)
	us := strings.ReplaceAll(uid, "-", "_")
	ot := strings.ReplaceAll(other, "-", "_")
	for _, tc := range []struct {
		name, cgroup string
		ok           bool
	}{
		{"cgroup v2, cgroupfs driver", "0::/kubepods/burstable/pod" + uid + "/0123abcd\n", true},
		{"cgroup v2, guaranteed QoS", "0::/kubepods/pod" + uid + "/0123abcd\n", true},
		{"cgroup v2, systemd driver", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + us + ".slice/cri-containerd-0123.scope\n", true},
		{"cgroup v2, systemd driver, guaranteed", "0::/kubepods.slice/kubepods-pod" + us + ".slice/cri-containerd-0123.scope\n", true},
		{"seen from another cgroup namespace", "0::/../../kubepods-besteffort.slice/kubepods-besteffort-pod" + us + ".slice/crio-1.scope\n", true},
		{"hybrid: v1 lines place it, v2 root", "12:pids:/kubepods/burstable/pod" + uid + "/c\n11:memory:/kubepods/burstable/pod" + uid + "/c\n0::/\n", true},
		{"a cgroup the Pod made inside its own, named like another Pod", "0::/kubepods/burstable/pod" + uid + "/c/pod" + other + "\n", true},
		{"static Pod UID", "0::/kubepods/burstable/pod0123456789abcdef0123456789abcdef/c\n", false},
		{"another Pod", "0::/kubepods/burstable/pod" + other + "/c\n", false},
		{"another Pod, systemd driver", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + ot + ".slice/x.scope\n", false},
		{"inside another Pod, a cgroup named like ours", "0::/kubepods/burstable/pod" + other + "/c/pod" + uid + "\n", false},
		{"two hierarchies disagree", "4:memory:/kubepods/burstable/pod" + uid + "/c\n0::/kubepods/burstable/pod" + other + "/c\n", false},
		{"no Pod", "0::/system.slice/containerd.service\n", false},
		{"root", "0::/\n", false},
		{"empty", "", false},
		{"uid as a substring", "0::/kubepods/burstable/xpod" + uid + "/c\n", false},
		{"podman, not a Pod", "0::/user.slice/podman-1234.scope\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckPodCgroup(tc.cgroup, uid)
			if (err == nil) != tc.ok {
				t.Errorf("CheckPodCgroup(%q) = %v, want ok %v", tc.cgroup, err, tc.ok)
			}
		})
	}
	if err := CheckPodCgroup("0::/kubepods/burstable/pod0123456789abcdef0123456789abcdef/c\n", "0123456789abcdef0123456789abcdef"); err != nil {
		t.Errorf("static Pod UID: %v", err)
	}
}

// dialOwn starts a fake launcher in its Pod's cgroup and dials it.
func dialOwn(t *testing.T, cg *cgroups, root string, total, breakEvery int) (*pod, *helper, *Client) {
	t.Helper()
	p := newPod(t, root)
	h := serveIn(t, cg.pod(p.uid, false), p.sockets, string(p.vmiUID), total, breakEvery)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, info, err := Dial(ctx, p.target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if info.GetLauncherVersion() != "fake" {
		t.Errorf("info %v", info)
	}
	return p, h, c
}

// A stream broken every 3 events is resumed at last seq + 1: every change
// arrives once, in order (each reconnection verified again).
func TestFollowResumes(t *testing.T) {
	cg := newCgroups(t)
	_, h, c := dialOwn(t, cg, t.TempDir(), 10, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var seqs []int64
	retries := 0
	err := c.Follow(ctx, 0, func(d *rpc.Domain) { seqs = append(seqs, d.GetSeq()) }, func(error) { retries++ })
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range seqs {
		if s != int64(i+1) {
			t.Fatalf("seqs %v, want 1..10 once each", seqs)
		}
	}
	if len(seqs) != 10 || retries != 3 {
		t.Errorf("seqs %v, %d retries", seqs, retries)
	}
	if got, want := strings.Join(h.waitLines("from ", 4), ","), "from 0,from 4,from 7,from 10"; got != want {
		t.Errorf("from_seq %s, want %s", got, want)
	}
}

// A launcher that dies mid-stream (nobody listens any more) is ErrGone.
func TestFollowGone(t *testing.T) {
	cg := newCgroups(t)
	_, h, c := dialOwn(t, cg, t.TempDir(), 100, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := 0
	err := c.Follow(ctx, 0, func(*rpc.Domain) {
		if n++; n == 2 {
			h.kill()
			os.Remove(h.socket)
		}
	}, nil)
	if !errors.Is(err, ErrGone) {
		t.Fatalf("Follow = %v, want ErrGone", err)
	}
	if err := Alive(c.Target()); !errors.Is(err, ErrGone) {
		t.Errorf("Alive = %v", err)
	}
}

// A launcher whose socket is replaced by a symlink to another Pod's
// launcher while the stream is broken: Follow stops with ErrUnverified,
// and the other launcher sees nothing.
func TestFollowSocketReplaced(t *testing.T) {
	cg := newCgroups(t)
	root := t.TempDir()
	_, h, c := dialOwn(t, cg, root, 100, 2)
	b := newPod(t, root)
	victim := serveIn(t, cg.pod(b.uid, false), b.sockets, string(b.vmiUID), 100, 100)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := 0
	err := c.Follow(ctx, 0, func(*rpc.Domain) {
		if n++; n == 2 {
			h.kill()
			if err := os.Remove(h.socket); err != nil {
				t.Error(err)
			}
			symlink(t, victim.socket, h.socket)
		}
	}, nil)
	if !errors.Is(err, ErrUnverified) {
		t.Fatalf("Follow = %v, want ErrUnverified", err)
	}
	t.Logf("Follow: %v", err)
	rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
	defer rcancel()
	if _, err := c.Pause(rctx, &rpc.Empty{}); err == nil {
		t.Error("Pause went through a replaced socket")
	}
	if got := victim.lines("rpc "); len(got) > 0 {
		t.Errorf("RPCs reached the other launcher: %v", got)
	}
	if got := victim.lines("accept"); len(got) > 0 {
		t.Errorf("%d connections reached the other launcher", len(got))
	}
}
