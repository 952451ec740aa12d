// Package launcherclient is the node agent's side of the launcher's command
// server (launcher/rpc): where a launcher Pod's socket lives on the host,
// whether it is ready, a verified connection, and a WatchDomain follower
// that resumes from the last sequence number it saw after a broken stream.
//
// The node agent talks only to the right launcher (verify.go): the socket
// is reached from the kubelet root without following any symlink
// (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS, one
// name at a time), must be a socket, and is connected to through
// /proc/self/fd/<its O_PATH descriptor> (no window between check and
// connect; no sockaddr_un length limit); the listening process
// (SO_PEERCRED) must be in the Pod's cgroup; the launcher's Info must
// report the VMI's UID. Anything else is refused with an *UnverifiedError
// before any command is sent.
package launcherclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kemu-dev/kemu/api/launcherpod"
	"github.com/kemu-dev/kemu/launcher/rpc"
)

// APIVersion is the command API version the node agent speaks.
const APIVersion = "v1"

// SocketsDir is the host path of a launcher Pod's sockets emptyDir:
// <kubeletRoot>/pods/<podUID>/volumes/kubernetes.io~empty-dir/sockets.
func SocketsDir(kubeletRoot string, podUID types.UID) string {
	return filepath.Join(append([]string{kubeletRoot}, socketsDirNames(podUID)...)...)
}

// SocketPath is the ready socket of a launcher Pod, seen from the host.
// It names the socket in messages; the client never opens this path as
// such (Target resolves it without following symlinks).
func SocketPath(kubeletRoot string, podUID types.UID) string {
	return filepath.Join(SocketsDir(kubeletRoot, podUID), launcherpod.Socket)
}

// Ready says whether the target's launcher.sock is there and is a socket
// (the launcher's readiness signal), resolving its path without following
// symlinks. (false, nil): the sockets directory is there but not the
// socket (yet). An error wrapping fs.ErrNotExist: a directory on the way is
// missing. An error wrapping ErrUnverified: a symlink on the way, a
// non-directory, or a launcher.sock that is not a socket.
func Ready(t Target) (bool, error) {
	fd, err := t.openSocket()
	if errors.Is(err, errNoSocket) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	unix.Close(fd)
	return true, nil
}

// Alive connects to the target once (without following symlinks, checking
// that the peer is in the Pod's cgroup) and hangs up without sending
// anything: nil if the Pod's launcher accepts; an error wrapping ErrGone if
// the socket (or its directory) is missing or nobody listens (the launcher
// died); an error wrapping ErrUnverified if what is there is not the Pod's
// launcher; another error otherwise.
func Alive(t Target) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, _, err := t.connect(ctx)
	if err == nil {
		_ = c.Close()
		return nil
	}
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("%w: %v", ErrGone, err)
	}
	return err
}

// ErrGone says the launcher's socket is gone or refuses connections.
var ErrGone = errors.New("launcher gone")

// Client is a connection to one verified launcher. Every connection the
// underlying gRPC channel makes (the first and any reconnection) goes
// through Target's checks; one that fails them is never used.
type Client struct {
	rpc.LauncherClient
	target Target
	conn   *grpc.ClientConn

	mu    sync.Mutex
	first *net.UnixConn // the connection Dial verified, for gRPC's first dial
	pid   int
}

// Dial connects to the target's launcher — resolving its socket without
// following symlinks, connecting to exactly the socket it checked, and
// requiring the answering process to be in the Pod's cgroup — then
// negotiates the API version with Info and requires the launcher's VMI UID
// to be t.VMIUID. A refusal is an error wrapping ErrUnverified (an
// *UnverifiedError); only Info has been sent then, and only to a process in
// the Pod's cgroup.
func Dial(ctx context.Context, t Target) (*Client, *rpc.InfoResponse, error) {
	if t.VMIUID == "" {
		return nil, nil, errors.New("launcherclient: Target.VMIUID is empty")
	}
	first, pid, err := t.connect(ctx)
	if err != nil {
		return nil, nil, err
	}
	c := &Client{target: t, first: first, pid: pid}
	conn, err := grpc.NewClient("passthrough:///launcher", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(c.dial),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))
	if err != nil {
		_ = first.Close()
		return nil, nil, err
	}
	c.conn, c.LauncherClient = conn, rpc.NewLauncherClient(conn)
	ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := c.Info(ictx, &rpc.InfoRequest{SupportedVersions: []string{APIVersion}})
	if err != nil {
		_ = c.Close()
		return nil, nil, fmt.Errorf("launcher %s: Info: %w", t.SocketPath(), err)
	}
	if got := info.GetVmiUid(); got != string(t.VMIUID) {
		_ = c.Close()
		u := unverified(ReasonVMIUIDMismatch, "the launcher on %s runs another VMI than uid %s", t.SocketPath(), t.VMIUID)
		u.Detail = fmt.Sprintf("pid %d reports VMI uid %q", c.PeerPID(), got)
		if got == "" {
			u.Message = fmt.Sprintf("the launcher on %s reports no VMI UID (started without --vmi-uid), not uid %s", t.SocketPath(), t.VMIUID)
		}
		return nil, nil, u
	}
	return c, info, nil
}

// dial is gRPC's dialer: the connection Dial verified first, then a newly
// verified one for each reconnection.
func (c *Client) dial(ctx context.Context, _ string) (net.Conn, error) {
	c.mu.Lock()
	if first := c.first; first != nil {
		c.first = nil
		c.mu.Unlock()
		return first, nil
	}
	c.mu.Unlock()
	conn, pid, err := c.target.connect(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.pid = pid
	c.mu.Unlock()
	return conn, nil
}

// PeerPID is the pid (in the node agent's PID namespace: the host's, with
// hostPID) of the launcher process on the client's current connection, as
// SO_PEERCRED reported it and checked to be in the Pod's cgroup.
func (c *Client) PeerPID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pid
}

// Target is what the client was dialled for.
func (c *Client) Target() Target { return c.target }

// Close closes the connection.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.first != nil {
		_ = c.first.Close()
		c.first = nil
	}
	c.mu.Unlock()
	return c.conn.Close()
}

// Follow streams domain changes into fn until the domain is Shutoff (nil),
// ctx ends (ctx's error), the launcher is gone (an error wrapping
// ErrGone), or what is at its socket no longer verifies (an error wrapping
// ErrUnverified: the stream broke and the socket was replaced). A broken stream is reopened with from_seq = last seq + 1, so no
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
		aerr := Alive(c.target)
		if errors.Is(aerr, ErrUnverified) {
			return fmt.Errorf("watch: %v; socket: %w", err, aerr)
		}
		if errors.Is(aerr, ErrGone) {
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
		if d.GetState() == rpc.DomainState_Shutoff {
			return nil
		}
	}
}
