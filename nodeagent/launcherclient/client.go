// Package launcherclient is the node agent's side of the launcher's command
// server (launcher/rpc): where a launcher Pod's socket lives on the host,
// whether it is ready, a connection, and a WatchDomain follower that
// resumes from the last sequence number it saw after a broken stream.
package launcherclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kemu-dev/kemu/launcher/rpc"
)

// APIVersion is the command API version the node agent speaks.
const APIVersion = "v1"

// Socket names in the launcher's sockets directory (launcher/cmdserver):
// the launcher listens on InitSocket and renames it to Socket once it
// answers.
const (
	InitSocket = "launcher-init.sock"
	Socket     = "launcher.sock"
	// SocketsVolume is the launcher Pod's emptyDir (controller/template).
	SocketsVolume = "sockets"
)

// SocketsDir is the host path of a launcher Pod's sockets emptyDir:
// <kubeletRoot>/pods/<podUID>/volumes/kubernetes.io~empty-dir/sockets.
func SocketsDir(kubeletRoot string, podUID types.UID) string {
	return filepath.Join(kubeletRoot, "pods", string(podUID), "volumes", "kubernetes.io~empty-dir", SocketsVolume)
}

// SocketPath is the ready socket of a launcher Pod, seen from the host.
func SocketPath(kubeletRoot string, podUID types.UID) string {
	return filepath.Join(SocketsDir(kubeletRoot, podUID), Socket)
}

// Ready says whether the ready socket exists (the readiness signal).
func Ready(socket string) bool {
	fi, err := os.Stat(socket)
	return err == nil && fi.Mode()&os.ModeSocket != 0
}

// maxUnixPath is the longest path a sockaddr_un holds. Launcher sockets
// seen from the host are longer (/var/lib/kubelet/pods/<uid>/volumes/
// kubernetes.io~empty-dir/sockets/launcher.sock is 117 bytes), so dialUnix
// goes through /proc/self/fd/<dir fd>/.
const maxUnixPath = 107

// dialUnix connects to a unix socket of any path length.
func dialUnix(ctx context.Context, path string) (net.Conn, error) {
	var d net.Dialer
	if len(path) <= maxUnixPath {
		return d.DialContext(ctx, "unix", path)
	}
	fd, err := unix.Open(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "unix", Err: &os.PathError{Op: "open", Path: filepath.Dir(path), Err: err}}
	}
	defer unix.Close(fd)
	return d.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d/%s", fd, filepath.Base(path)))
}

// Alive dials the socket once: nil if a process accepts on it,
// ErrGone if the file is missing or nobody listens (the launcher died), another
// error otherwise.
func Alive(socket string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := dialUnix(ctx, socket)
	if err == nil {
		_ = c.Close()
		return nil
	}
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("%w: %v", ErrGone, err)
	}
	return err
}

// ErrGone says the launcher's socket is gone or refuses connections.
var ErrGone = errors.New("launcher gone")

// Client is a connection to one launcher.
type Client struct {
	rpc.LauncherClient
	Socket string
	conn   *grpc.ClientConn
}

// Dial connects to socket (of any length) and negotiates the API version
// with Info.
func Dial(ctx context.Context, socket string) (*Client, *rpc.InfoResponse, error) {
	conn, err := grpc.NewClient("passthrough:///launcher", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return dialUnix(ctx, socket) }),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))
	if err != nil {
		return nil, nil, err
	}
	c := &Client{LauncherClient: rpc.NewLauncherClient(conn), Socket: socket, conn: conn}
	ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := c.Info(ictx, &rpc.InfoRequest{SupportedVersions: []string{APIVersion}})
	if err != nil {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("launcher %s: Info: %w", socket, err)
	}
	return c, info, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Follow streams domain changes into fn until the domain is Shutoff (nil),
// ctx ends (ctx's error), or the launcher is gone (an error wrapping
// ErrGone). A broken stream is reopened with from_seq = last seq + 1, so no
// change the launcher still keeps is lost; fromSeq 0 starts at the current
// state. onRetry, if set, is called before each reconnection.
func (c *Client) Follow(ctx context.Context, fromSeq int64, fn func(*rpc.Domain), onRetry func(err error)) error {
	next := fromSeq
	failures := 0
	for {
		err := c.follow(ctx, &next, fn)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if aerr := Alive(c.Socket); errors.Is(aerr, ErrGone) {
			failures++
			// Three probes half a second apart: a launcher busy accepting is
			// not a dead one.
			if failures >= 3 {
				return fmt.Errorf("%w: watch: %v; socket: %v", ErrGone, err, aerr)
			}
		} else {
			failures = 0
		}
		if onRetry != nil {
			onRetry(err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// follow reads one stream; it advances *next past every change it hands
// to fn.
func (c *Client) follow(ctx context.Context, next *int64, fn func(*rpc.Domain)) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.WatchDomain(sctx, &rpc.WatchRequest{FromSeq: *next})
	if err != nil {
		return err
	}
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			// The server ends the stream only after Shutoff, which fn saw.
			return nil
		}
		if err != nil {
			if s, ok := status.FromError(err); ok && s.Code() == codes.Canceled && ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		d := ev.GetDomain()
		if d == nil {
			continue
		}
		if d.GetSeq() >= *next {
			*next = d.GetSeq() + 1
		}
		fn(d)
		if d.GetState() == "Shutoff" {
			return nil
		}
	}
}
