package launcherclient

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kemu-dev/kemu/launcher/rpc"
)

func TestSocketPath(t *testing.T) {
	got := SocketPath("/var/lib/kubelet", "1234-abcd")
	if want := "/var/lib/kubelet/pods/1234-abcd/volumes/kubernetes.io~empty-dir/sockets/launcher.sock"; got != want {
		t.Errorf("SocketPath = %q, want %q", got, want)
	}
}

// fakeLauncher streams domains 1..total, breaking the stream after every
// breakEvery events; it records the from_seq of each WatchDomain.
type fakeLauncher struct {
	rpc.UnimplementedLauncherServer
	total, breakEvery int64
	mu                sync.Mutex
	froms             []int64
}

func (f *fakeLauncher) Info(context.Context, *rpc.InfoRequest) (*rpc.InfoResponse, error) {
	return &rpc.InfoResponse{Version: "v1", LauncherVersion: "fake"}, nil
}

func (f *fakeLauncher) WatchDomain(req *rpc.WatchRequest, s grpc.ServerStreamingServer[rpc.WatchEvent]) error {
	f.mu.Lock()
	f.froms = append(f.froms, req.GetFromSeq())
	f.mu.Unlock()
	seq := max(req.GetFromSeq(), 1)
	for sent := int64(0); seq <= f.total; seq++ {
		if sent == f.breakEvery {
			return status.Error(codes.Unavailable, "broken on purpose")
		}
		state := "Running"
		if seq == f.total {
			state = "Shutoff"
		}
		if err := s.Send(&rpc.WatchEvent{Event: &rpc.WatchEvent_Domain{Domain: &rpc.Domain{Seq: seq, State: state}}}); err != nil {
			return err
		}
		sent++
	}
	return nil
}

func serve(t *testing.T, srv rpc.LauncherServer) (string, func()) {
	t.Helper()
	dir, err := os.MkdirTemp("", "lc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, Socket)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	rpc.RegisterLauncherServer(g, srv)
	go func() { _ = g.Serve(lis) }()
	return sock, g.Stop
}

// A stream broken every 3 events is resumed at last seq + 1: every change
// arrives once, in order.
func TestFollowResumes(t *testing.T) {
	f := &fakeLauncher{total: 10, breakEvery: 3}
	sock, stop := serve(t, f)
	defer stop()
	if !Ready(sock) {
		t.Fatal("not ready")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, info, err := Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if info.GetLauncherVersion() != "fake" {
		t.Errorf("info %v", info)
	}
	var seqs []int64
	retries := 0
	err = c.Follow(ctx, 0, func(d *rpc.Domain) { seqs = append(seqs, d.GetSeq()) }, func(error) { retries++ })
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
	f.mu.Lock()
	defer f.mu.Unlock()
	if want := []int64{0, 4, 7, 10}; len(f.froms) != 4 || f.froms[1] != want[1] || f.froms[2] != want[2] || f.froms[3] != want[3] {
		t.Errorf("from_seq %v, want %v", f.froms, want)
	}
}

// A socket path longer than sockaddr_un holds (as under a kubelet root) is
// dialled through /proc/self/fd.
func TestLongPath(t *testing.T) {
	sock, stop := serve(t, &fakeLauncher{total: 1})
	defer stop()
	long := filepath.Join(t.TempDir(), "pods", "0123456789abcdef0123456789abcdef0123", "volumes", "kubernetes.io~empty-dir")
	if err := os.MkdirAll(long, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(long, SocketsVolume)
	if err := os.Symlink(filepath.Dir(sock), link); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(link, Socket)
	if len(path) <= maxUnixPath {
		t.Fatalf("path %s is not long", path)
	}
	if err := Alive(path); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := Dial(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := Alive(filepath.Join(link, "nothing.sock")); !errors.Is(err, ErrGone) {
		t.Errorf("Alive(missing) = %v", err)
	}
}

// A launcher that dies mid-stream (nobody listens any more) is ErrGone.
func TestFollowGone(t *testing.T) {
	f := &fakeLauncher{total: 100, breakEvery: 2}
	sock, stop := serve(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, _, err := Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n := 0
	err = c.Follow(ctx, 0, func(*rpc.Domain) {
		if n++; n == 2 {
			stop()
			os.Remove(sock)
		}
	}, nil)
	if !errors.Is(err, ErrGone) {
		t.Fatalf("Follow = %v, want ErrGone", err)
	}
	if err := Alive(sock); !errors.Is(err, ErrGone) {
		t.Errorf("Alive = %v", err)
	}
}
