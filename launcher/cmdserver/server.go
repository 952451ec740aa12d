// Package cmdserver is the launcher's command server: the gRPC service
// (launcher/rpc, package kemu.launcher.v1, service Launcher) that the node
// agent and `kemuctl shell` call over a unix socket, on top of one
// *launcher.Launcher. It is kemu's equivalent of virt-launcher's cmd server.
//
// # Socket and readiness
//
// Start listens on <SocketsDir>/launcher-init.sock (a stale file, and a stale
// launcher.sock, left by a crashed launcher are removed first), makes it mode
// 0600, serves, checks that the server answers a Ping through a client on
// that socket, and only then renames it to <SocketsDir>/launcher.sock: the
// rename is the readiness signal. Clients dial "unix://" + SocketPath(dir)
// (or Server.Socket()) with grpc.NewClient and rpc.NewLauncherClient.
// gRPC server reflection is on (grpcurl -plaintext -unix PATH list).
//
// # The launcher behind it
//
// A server built with New creates its Launcher on the first Sync, from the
// VMI JSON and Options.Config (its VMI field is ignored); Attach hands it an
// already started Launcher instead (kemuctl run). Until then every RPC but
// Info, Ping, Sync and WatchDomain (which waits) answers FailedPrecondition.
// A launcher runs one VM for its whole life: once that VM has ended, the
// server reports its final state but starts no other. Abandon (a signal
// before the VM started) cancels a start under way, kills a VM started
// meanwhile and refuses every later Sync.
//
// # RPCs (see launcher/rpc/launcher.proto)
//
//   - Info: API version negotiation; the only version is "v1". It also
//     reports the UID of the VMI the launcher was started for
//     (Options.VMIUID, the Pod's --vmi-uid; empty standalone), which the
//     node agent checks before it sends anything else.
//   - Sync: VMI JSON (or YAML) → decoded strictly, defaulted and validated
//     (InvalidArgument naming every bad field path). The first Sync starts
//     the VM (action "started"); the same spec again does nothing
//     ("unchanged"); a different terminationGracePeriodSeconds is taken for
//     later shutdowns ("updated"); any other spec change cannot be applied to
//     a running QEMU and answers FailedPrecondition naming the changed paths;
//     a different metadata.uid answers FailedPrecondition, and so does a
//     VMI whose metadata.uid is not Options.VMIUID (when set), before
//     anything starts.
//   - Pause (needs Running), Unpause (needs Paused), Reset (needs Running or
//     Paused), SoftReboot (needs Running; the guest agent's guest-shutdown
//     mode=reboot when it is connected, else Ctrl+Alt+Delete on the guest's
//     keyboard; the reply names the method): FailedPrecondition in another
//     state, Unavailable once QEMU is gone.
//   - Shutdown: the ACPI power button, pressed again until the grace period
//     (request, else the server's override, else the VMI's) ends, then
//     quit, then kill; returns the final domain. A client that goes away does not cut the grace
//     period short. Kill: SIGKILL. Both answer the final state if the VM
//     already ended.
//   - GetDomain, GetStats (vCPU threads with their CPU time from /proc, block
//     stats, balloon), GuestPing, GuestInfo (agent version, OS info,
//     hostname, interfaces; a 10 s deadline when the client set none),
//     GuestUsers (guest-get-users), GuestFilesystems (guest-get-fsinfo),
//     GuestExec (a command's exit status through guest-exec, no output; an
//     exec probe's, bounded as one: InvalidArgument beyond):
//     any state QEMU runs in; the agent refusing a command is
//     FailedPrecondition naming it.
//   - WatchDomain: from_seq 0 streams the current state then every change;
//     N > 0 streams every change with seq >= N still kept (the launcher keeps
//     the last 1024), so a client that reconnects with last seen seq + 1
//     misses nothing. qmp_events adds QEMU's events from the moment of the
//     call. The stream ends after the Shutoff state.
//   - Qmp: one raw QMP command through the launcher's own monitor; QEMU's
//     error replies come back as JSON, not as gRPC errors. Only read-only
//     commands (query-*, qom-list, qom-list-types; ReadOnlyQMP) pass unless
//     the server runs with Options.AllowRawQMP (kemu-launcher
//     --allow-raw-qmp, for debugging); others answer PermissionDenied naming
//     the command and the flag. Without it, QEMU's second (debug) QMP socket
//     is also removed before the guest runs.
//   - Console: the serial console; output is what the guest writes from the
//     attach on, input is written to the guest.
//   - Vnc (Running, Paused, Migrating or ShuttingDown): the stream spliced
//     to a fresh connection to QEMU's VNC server (RFB, unparsed);
//     FailedPrecondition when the VM has no graphics device, at most
//     MaxVNCStreams at once (ResourceExhausted beyond).
//   - PrepareMigrationTarget: like a first Sync, but QEMU waits for an
//     incoming migration (launcher.StartMigrationTarget); answers the unix
//     sockets it listens on. FailedPrecondition if the VM already runs.
//   - Migrate (Running or Paused): starts the outgoing migration to the
//     given sockets and returns; progress in Domain.migration.
//     CancelMigration and FinalizeMigration (Migrating): cancel before the
//     switchover (the source keeps the guest; after a completed migration
//     whose target failed: resume the source), end the source once the
//     target runs. A wrong migration state (or post-copy for a cancel) is
//     FailedPrecondition.
//
// Errors: InvalidArgument (bad VMI, malformed JSON), PermissionDenied (a
// raw QMP command that is not read-only), FailedPrecondition
// (wrong state, no VM yet), Unavailable (QEMU gone), DeadlineExceeded and
// Canceled passed through, ResourceExhausted for a message over 16 MiB.
// Panics in handlers are recovered into Internal: no RPC can crash the
// launcher.
package cmdserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/launcher"
	"github.com/kemu-dev/kemu/launcher/rpc"
)

// APIVersion is the command API version this server speaks.
const APIVersion = "v1"

// MaxRecvMsgSize bounds a request; larger ones answer ResourceExhausted.
const MaxRecvMsgSize = 16 << 20

// maxUnixPath is the longest unix socket path Linux takes.
const maxUnixPath = 107

// SocketPath is the ready socket's path in a sockets directory.
func SocketPath(socketsDir string) string { return filepath.Join(socketsDir, launcherpod.Socket) }

// Options configure a Server.
type Options struct {
	// SocketsDir holds the socket; created (0700) if missing.
	SocketsDir string
	// Config is the template of the Launcher the first Sync creates (its
	// VMI is replaced by the synced one). Unused with Attach.
	Config launcher.Config
	// GracePeriod, if > 0, overrides the VMI's terminationGracePeriodSeconds
	// for Shutdown requests without one (and Server.Shutdown).
	GracePeriod time.Duration
	// StartTimeout bounds starting the VM on Sync (default 5 minutes).
	StartTimeout time.Duration
	// Version is the launcher's version, reported by Info.
	Version string
	// VMIUID is the UID of the VMI this launcher was started for (its Pod's
	// --vmi-uid): Info reports it and Sync refuses any other VMI. Empty
	// (standalone, kemuctl run): no check.
	VMIUID types.UID
	// AllowRawQMP lets the Qmp RPC pass any command to QEMU and keeps
	// QEMU's second (debug) QMP socket; without it the Qmp RPC passes only
	// read-only commands (ReadOnlyQMP) and the debug socket is removed
	// before the guest runs (RemoveDebugQMP). For debugging only
	// (launcherpod.FlagAllowRawQMP); the controller never sets it.
	AllowRawQMP bool
}

// Server is the command server of one launcher.
type Server struct {
	rpc.UnimplementedLauncherServer

	opts Options
	grpc *grpc.Server
	lis  *net.UnixListener

	syncMu sync.Mutex // serialises Sync (one start at a time)

	mu          sync.Mutex
	l           *launcher.Launcher
	vmi         *v1.VirtualMachineInstance // defaulted, as last synced
	grace       time.Duration
	qemuVer     string
	startedAt   time.Time
	started     chan struct{} // closed once l is set
	shutdownCh  chan struct{} // closed when a shutdown finished
	shutdown    *launcher.Domain
	shutErr     error
	shutOnce    bool
	stopRPC     bool               // the Shutdown or Kill RPC was called (StopRequested)
	abandoned   bool               // Abandon was called: no VM may start
	cancelStart context.CancelFunc // ends the start under way, if any

	vncSlots chan struct{} // one per open Vnc stream (MaxVNCStreams)
}

// New returns a server; Start makes it listen.
func New(opts Options) *Server {
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 5 * time.Minute
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	s := &Server{opts: opts, started: make(chan struct{}), vncSlots: make(chan struct{}, MaxVNCStreams)}
	s.grpc = grpc.NewServer(
		grpc.MaxRecvMsgSize(MaxRecvMsgSize),
		grpc.ChainUnaryInterceptor(unaryInterceptor),
		grpc.ChainStreamInterceptor(streamInterceptor),
	)
	rpc.RegisterLauncherServer(s.grpc, s)
	reflection.Register(s.grpc)
	return s
}

// Attach gives the server an already started Launcher (kemuctl run). It
// fails if the server already has one.
func (s *Server) Attach(l *launcher.Launcher) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.l != nil {
		return errors.New("cmdserver: a launcher is already attached")
	}
	s.setLauncherLocked(l)
	return nil
}

// setLauncherLocked publishes a launcher whose Start has returned.
func (s *Server) setLauncherLocked(l *launcher.Launcher) {
	s.l = l
	s.vmi = l.VMI()
	if g := l.VMI().Spec.TerminationGracePeriodSeconds; g != nil {
		s.grace = time.Duration(*g) * time.Second
	}
	if m := l.Monitor(); m != nil {
		s.qemuVer = m.Greeting().QMP.Version.String()
	}
	s.startedAt = time.Now()
	if w := l.Watch(true); w != nil {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // only what is already recorded
		if d, err := w.Next(ctx); err == nil {
			s.startedAt = d.Since
		}
	}
	close(s.started)
}

// Launcher returns the launcher, or nil before the first Sync.
func (s *Server) Launcher() *launcher.Launcher {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.l
}

// Started is closed once the server has a launcher (started, or failed to).
func (s *Server) Started() <-chan struct{} { return s.started }

// Socket is the ready socket's path.
func (s *Server) Socket() string { return SocketPath(s.opts.SocketsDir) }

// Start listens on launcher-init.sock, serves, checks that the server
// answers, and renames the socket to launcher.sock. It returns once the
// server is ready; serving goes on until Stop.
func (s *Server) Start(ctx context.Context) error {
	dir := s.opts.SocketsDir
	if dir == "" {
		return errors.New("cmdserver: no sockets directory")
	}
	initPath, final := filepath.Join(dir, launcherpod.InitSocket), SocketPath(dir)
	if len(initPath) > maxUnixPath {
		return fmt.Errorf("cmdserver: socket path %s is longer than %d bytes", initPath, maxUnixPath)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("cmdserver: sockets directory: %w", err)
	}
	for _, p := range []string{initPath, final} {
		if err := os.Remove(p); err == nil {
			klog.InfoS("Removed a stale launcher socket", "path", p)
		} else if !os.IsNotExist(err) {
			return fmt.Errorf("cmdserver: removing stale socket: %w", err)
		}
	}
	lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: initPath, Net: "unix"})
	if err != nil {
		return fmt.Errorf("cmdserver: listen: %w", err)
	}
	lis.SetUnlinkOnClose(false) // the file is renamed; Stop removes it
	if err := os.Chmod(initPath, 0o600); err != nil {
		lis.Close()
		os.Remove(initPath)
		return fmt.Errorf("cmdserver: socket mode: %w", err)
	}
	s.lis = lis
	go func() {
		if err := s.grpc.Serve(lis); err != nil {
			klog.ErrorS(err, "Command server stopped")
		}
	}()
	if err := ping(ctx, initPath); err != nil {
		s.grpc.Stop()
		os.Remove(initPath)
		return fmt.Errorf("cmdserver: the server does not answer on %s: %w", initPath, err)
	}
	if err := os.Rename(initPath, final); err != nil {
		s.grpc.Stop()
		os.Remove(initPath)
		return fmt.Errorf("cmdserver: readiness rename: %w", err)
	}
	klog.InfoS("Command server ready", "socket", final)
	return nil
}

func ping(ctx context.Context, path string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = rpc.NewLauncherClient(conn).Ping(ctx, &rpc.PingRequest{}, grpc.WaitForReady(true))
	return err
}

// Stop ends serving (open streams get up to 5 s) and removes the socket.
// It does not touch the VM.
func (s *Server) Stop() {
	done := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(done) }()
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		s.grpc.Stop()
	}
	if s.lis != nil {
		os.Remove(SocketPath(s.opts.SocketsDir))
		os.Remove(filepath.Join(s.opts.SocketsDir, launcherpod.InitSocket))
	}
}

// Grace is the grace period Shutdown uses when none is asked.
func (s *Server) Grace() time.Duration {
	if s.opts.GracePeriod > 0 {
		return s.opts.GracePeriod
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.grace
}

// StopRequested says whether the Shutdown or Kill RPC was called: the
// node agent asked the VM to stop (it does so for a deletion), as opposed
// to a signal alone (kemu-launcher's exit status tells them apart).
func (s *Server) StopRequested() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopRPC
}

func (s *Server) setStopRequested() {
	s.mu.Lock()
	s.stopRPC = true
	s.mu.Unlock()
}

// ShutdownVM shuts the VM down gracefully (grace <= 0: Grace()) and
// returns its final state (the Shutdown RPC, and the launcher main on
// SIGTERM). Concurrent calls share one shutdown. ctx only bounds the wait:
// the shutdown itself goes on if ctx ends.
func (s *Server) ShutdownVM(ctx context.Context, grace time.Duration) (launcher.Domain, error) {
	l := s.Launcher()
	if l == nil {
		return launcher.Domain{}, status.Error(codes.FailedPrecondition, "no VM yet: Sync first")
	}
	if grace <= 0 {
		grace = s.Grace()
	}
	s.mu.Lock()
	if !s.shutOnce {
		s.shutOnce = true
		s.shutdownCh = make(chan struct{})
		ch := s.shutdownCh
		go func() {
			var d launcher.Domain
			var err error
			if l.Domain().State == launcher.StateShutoff {
				d, err = l.Wait(context.Background())
			} else {
				klog.InfoS("Shutting the VM down", "grace", grace)
				d, err = l.Shutdown(context.Background(), grace)
			}
			s.mu.Lock()
			s.shutdown, s.shutErr = &d, err
			s.mu.Unlock()
			close(ch)
		}()
	}
	ch := s.shutdownCh
	s.mu.Unlock()
	select {
	case <-ch:
		s.mu.Lock()
		defer s.mu.Unlock()
		return *s.shutdown, s.shutErr
	case <-ctx.Done():
		return l.Domain(), ctx.Err()
	}
}

// Abandon is for a launcher told to stop before its VM started (the
// launcher main on SIGTERM while it waits for a Sync, or during the
// start): every later Sync answers Unavailable, a start under way is
// cancelled (Start leaves nothing behind) and waited for, and a VM that got
// started all the same is killed. It returns the VM's final state (zero
// without a launcher) and whether a VM ran and was killed; ctx bounds the
// wait.
func (s *Server) Abandon(ctx context.Context) (launcher.Domain, bool, error) {
	s.mu.Lock()
	s.abandoned = true
	if s.cancelStart != nil {
		s.cancelStart()
	}
	s.mu.Unlock()
	synced := make(chan *launcher.Launcher, 1)
	go func() {
		s.syncMu.Lock() // once a Sync under way has returned
		defer s.syncMu.Unlock()
		synced <- s.Launcher()
	}()
	var l *launcher.Launcher
	select {
	case l = <-synced:
	case <-ctx.Done():
		return launcher.Domain{}, false, fmt.Errorf("cmdserver: waiting for the start under way: %w", ctx.Err())
	}
	if l == nil {
		return launcher.Domain{}, false, nil
	}
	if d := l.Domain(); d.State == launcher.StateShutoff {
		return d, false, nil // the start failed, or was cancelled
	}
	d, err := l.Kill(ctx)
	return d, true, err
}

// errAbandoned answers a Sync after Abandon.
var errAbandoned = status.Error(codes.Unavailable, "the launcher is stopping: it was told to before any VM started")

func (s *Server) isAbandoned() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.abandoned
}

// unaryInterceptor logs calls and turns panics into Internal errors.
func unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	t0 := time.Now()
	defer func() {
		if r := recover(); r != nil {
			klog.ErrorS(fmt.Errorf("panic: %v", r), "RPC handler panicked", "method", info.FullMethod, "stack", string(debug.Stack()))
			resp, err = nil, status.Errorf(codes.Internal, "%s: internal error: %v", info.FullMethod, r)
		}
		logCall(info.FullMethod, t0, err)
	}()
	return h(ctx, req)
}

func streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
	t0 := time.Now()
	defer func() {
		if r := recover(); r != nil {
			klog.ErrorS(fmt.Errorf("panic: %v", r), "RPC handler panicked", "method", info.FullMethod, "stack", string(debug.Stack()))
			err = status.Errorf(codes.Internal, "%s: internal error: %v", info.FullMethod, r)
		}
		logCall(info.FullMethod, t0, err)
	}()
	return h(srv, ss)
}

func logCall(method string, t0 time.Time, err error) {
	if err != nil {
		klog.V(2).InfoS("RPC failed", "method", method, "took", time.Since(t0), "code", status.Code(err), "err", err)
		return
	}
	klog.V(4).InfoS("RPC", "method", method, "took", time.Since(t0))
}
