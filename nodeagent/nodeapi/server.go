// Package nodeapi is the node agent's side of kube/nodeapi: the HTTPS
// server through which kemu-api, and only kemu-api, reaches the VMIs this
// node agent runs — the serial console and VNC as HTTP/1.1 Upgrades spliced
// with the launcher's Console and Vnc streams, and the guest agent's
// reports (guestosinfo, userlist, filesystemlist) and the VMI's resource
// figures (stats, the launcher's GetStats) as JSON. TLS 1.3 with
// the node's certificate from the migration certificate store (renewals
// apply to new connections); client certificates are required, verified
// against kemu's CA and must be kemu-api's identity exactly. See
// docs/nodeagent.md.
package nodeapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/kube/nodeapi"
	"github.com/kemu-dev/kemu/launcher/rpc"
	"github.com/kemu-dev/kemu/nodeagent/migrationproxy"
	"github.com/kemu-dev/kemu/nodeagent/vmi"
)

// Limits.
const (
	// DefaultCallTimeout bounds a non-stream call (guestosinfo, userlist,
	// filesystemlist, stats) end to end.
	DefaultCallTimeout = 30 * time.Second
	// readHeaderTimeout bounds a request's headers; maxHeaderBytes their
	// size. No handler reads a request body.
	readHeaderTimeout = 10 * time.Second
	maxHeaderBytes    = 16 << 10
	idleTimeout       = 2 * time.Minute
)

// Launchers finds the current launcher of a VMI on this node
// (nodeagent/vmi's Controller).
type Launchers interface {
	CurrentLauncher(namespace, name string) (vmi.APILauncher, bool)
}

// Config are Serve's inputs.
type Config struct {
	// Store is the node's TLS material (the migration certificate).
	Store     *migrationproxy.Store
	Launchers Launchers
	// CallTimeout bounds each non-stream call (default DefaultCallTimeout).
	CallTimeout time.Duration
}

// Server is the running API server.
type Server struct {
	cfg     Config
	ln      net.Listener
	http    *http.Server
	ctx     context.Context // ends when the server closes: streams end
	cancel  context.CancelFunc
	served  chan struct{}
	streams streamSlots
}

// Listen listens on addr and serves until ctx ends or Close.
func Listen(ctx context.Context, addr string, cfg Config) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("node API on %s: %w", addr, err)
	}
	return Serve(ctx, ln, cfg)
}

// Serve serves on ln until ctx ends or Close.
func Serve(ctx context.Context, ln net.Listener, cfg Config) (*Server, error) {
	if cfg.Store == nil || cfg.Launchers == nil {
		_ = ln.Close()
		return nil, errors.New("node API: Store and Launchers are required")
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &Server{cfg: cfg, ctx: sctx, cancel: cancel, served: make(chan struct{}), streams: streamSlots{slots: map[slotKey]*slot{}}}
	mux := http.NewServeMux()
	vmiPath := nodeapi.Path("{namespace}", "{name}", "")
	mux.HandleFunc("GET "+vmiPath+"/{verb}", s.handle)
	logger := klog.FromContext(ctx).WithName("nodeapi")
	s.http = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: readHeaderTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		IdleTimeout:       idleTimeout,
		// HTTP/1.1 only: the streams are Upgrades.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
		// Refused handshakes (a node's certificate, none) are warnings.
		ErrorLog:    klog.NewStandardLogger("WARNING"),
		BaseContext: func(net.Listener) context.Context { return klog.NewContext(sctx, logger) },
	}
	s.ln = tls.NewListener(ln, serverTLS(cfg.Store))
	go func() {
		defer close(s.served)
		if err := s.http.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "Node API server stopped")
		}
	}()
	context.AfterFunc(ctx, func() { _ = s.Close() })
	return s, nil
}

// Addr is the listening address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops listening, ends every stream and waits for the server.
func (s *Server) Close() error {
	s.cancel()
	err := s.http.Close()
	<-s.served
	s.streams.wait()
	return err
}

// handle serves one verb on one VMI after the lookup: the VMI's current
// launcher on this node, with the UID kemu-api authorized.
func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	ns, name, verb := r.PathValue("namespace"), r.PathValue("name"), r.PathValue("verb")
	switch verb {
	case nodeapi.Console, nodeapi.VNC, nodeapi.GuestOSInfo, nodeapi.UserList, nodeapi.FilesystemList, nodeapi.Stats:
	default:
		writeError(w, http.StatusNotFound, metav1.StatusReasonNotFound, fmt.Sprintf("no verb %q", verb))
		return
	}
	uid := r.Header.Get(nodeapi.UIDHeader)
	if uid == "" {
		writeError(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "header "+nodeapi.UIDHeader+" (the VMI's UID) is required")
		return
	}
	l, ok := s.cfg.Launchers.CurrentLauncher(ns, name)
	if !ok {
		writeError(w, http.StatusNotFound, metav1.StatusReasonNotFound,
			fmt.Sprintf("VMI %s/%s has no connected launcher on this node", ns, name))
		return
	}
	if string(l.VMIUID) != uid {
		writeError(w, http.StatusConflict, metav1.StatusReasonConflict,
			fmt.Sprintf("VMI %s/%s on this node has UID %s, not %s", ns, name, l.VMIUID, uid))
		return
	}
	if l.State == rpc.DomainState_Shutoff {
		writeError(w, http.StatusConflict, metav1.StatusReasonConflict, fmt.Sprintf("VMI %s/%s is not running", ns, name))
		return
	}
	logger := klog.FromContext(r.Context()).WithValues("vmi", klog.KRef(ns, name), "verb", verb)
	r = r.WithContext(klog.NewContext(r.Context(), logger))
	switch verb {
	case nodeapi.Console, nodeapi.VNC:
		s.serveStream(w, r, verb, l)
	case nodeapi.Stats:
		s.serveStats(w, r, l)
	default:
		s.serveGuest(w, r, verb, l)
	}
}
