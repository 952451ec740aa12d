package migrationproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// Timeouts of a connection's setup. The TLS handshake, the header and the
// status answer must all fit in HeaderTimeout; a silent or slow peer is
// dropped without holding a goroutine longer.
const (
	HeaderTimeout = 10 * time.Second
	dialTimeout   = 5 * time.Second
	// acceptBackoff bounds the wait after a failing Accept.
	acceptBackoff = time.Second
)

// DefaultAddr is the proxy's default listen address.
const DefaultAddr = ":8186"

// Server is a node's migration proxy: one TLS listener that splices each
// authenticated connection to the unix socket Registered for its
// migration UID and channel.
type Server struct {
	store  *Store
	ln     net.Listener
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	routes map[string]route // by migration UID

	conns tracker
}

// Listen starts the proxy on addr (TCP). It serves until ctx ends or
// Close is called.
func Listen(ctx context.Context, addr string, store *Store) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("migration proxy listen on %s: %w", addr, err)
	}
	return Serve(ctx, ln, store), nil
}

// Serve runs the proxy on ln, which it owns from now on.
func Serve(ctx context.Context, ln net.Listener, store *Store) *Server {
	sctx, cancel := context.WithCancel(ctx)
	s := &Server{store: store, ln: ln, ctx: sctx, cancel: cancel, routes: map[string]route{}}
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		<-sctx.Done()
		ln.Close()
		s.conns.closeAll()
	}()
	go func() {
		defer s.wg.Done()
		s.acceptLoop()
	}()
	klog.InfoS("Migration proxy listening", "addr", ln.Addr().String())
	return s
}

// Addr is the address the proxy listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops the listener, ends every active splice and waits until
// every goroutine of the server returned.
func (s *Server) Close() error {
	s.cancel()
	s.wg.Wait()
	return nil
}

// route is a registered migration.
type route struct {
	// sourceNode is the only peer (its certificate's CN) accepted.
	sourceNode string
	dials      map[string]DialFunc // channel → the local end
}

// DialFunc connects to the local end of one channel of a registered
// migration (the target launcher's socket). It is called for each
// authenticated connection, after the header was accepted.
type DialFunc func(ctx context.Context) (*net.UnixConn, error)

// UnixDialer dials the unix socket at path (absolute).
func UnixDialer(path string) DialFunc {
	return func(ctx context.Context) (*net.UnixConn, error) {
		d := net.Dialer{Timeout: dialTimeout}
		c, err := d.DialContext(ctx, "unix", path)
		if err != nil {
			return nil, err
		}
		return c.(*net.UnixConn), nil
	}
}

// Register routes migration uid's channels to local unix sockets
// (absolute paths, channel → path), for connections from sourceNode only
// (the CN of the peer's certificate). It replaces an earlier registration
// of uid; connections already spliced keep going.
func (s *Server) Register(uid, sourceNode string, sockets map[string]string) error {
	dials := make(map[string]DialFunc, len(sockets))
	for ch, path := range sockets {
		if !filepath.IsAbs(path) {
			return fmt.Errorf("register migration %s: channel %s: socket path %q is not absolute", uid, ch, path)
		}
		dials[ch] = UnixDialer(path)
	}
	return s.RegisterDial(uid, sourceNode, dials)
}

// RegisterDial is Register with a dial function per channel: the node
// agent's verified connection to the target launcher's socket (no
// symlink followed, the listener in the target Pod), made anew for each
// connection.
func (s *Server) RegisterDial(uid, sourceNode string, dials map[string]DialFunc) error {
	if err := ValidateUID(uid); err != nil {
		return fmt.Errorf("register migration: %w", err)
	}
	if sourceNode == "" {
		return fmt.Errorf("register migration %s: no source node", uid)
	}
	routes := make(map[string]DialFunc, len(dials))
	for ch, dial := range dials {
		if !ValidChannel(ch) {
			return fmt.Errorf("register migration %s: unknown channel %q", uid, ch)
		}
		if dial == nil {
			return fmt.Errorf("register migration %s: channel %s: no dial function", uid, ch)
		}
		routes[ch] = dial
	}
	s.mu.Lock()
	s.routes[uid] = route{sourceNode: sourceNode, dials: routes}
	s.mu.Unlock()
	klog.InfoS("Migration registered with the proxy", "migrationUID", uid, "sourceNode", sourceNode, "channels", len(routes))
	return nil
}

// Unregister forgets uid and ends its active splices.
func (s *Server) Unregister(uid string) {
	if ValidateUID(uid) != nil {
		return // never registered; "" would name the connections still in their handshake
	}
	s.mu.Lock()
	delete(s.routes, uid)
	s.mu.Unlock()
	s.conns.endUID(uid)
	klog.InfoS("Migration unregistered from the proxy", "migrationUID", uid)
}

// route finds the dial function of h for a peer named peer. A peer other
// than the migration's source is told the migration is unknown.
func (s *Server) route(h Header, peer string) (DialFunc, Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.routes[h.UID]
	if !ok || r.sourceNode != peer {
		return nil, StatusUnknownMigration
	}
	dial, ok := r.dials[h.Channel]
	if !ok {
		return nil, StatusUnknownChannel
	}
	return dial, StatusOK
}

func (s *Server) acceptLoop() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if s.ctx.Err() != nil {
				return
			}
			klog.ErrorS(err, "Migration proxy accept failed")
			select {
			case <-s.ctx.Done():
				return
			case <-time.After(acceptBackoff):
			}
			continue
		}
		sess := s.conns.start("", c)
		if sess == nil {
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.conns.finish(sess)
			s.handle(sess, c)
		}()
	}
}

// handle authenticates c, reads its header, and splices it to the
// registered unix socket. Nothing is dialed before the peer's certificate
// and the header were accepted.
func (s *Server) handle(sess *session, c net.Conn) {
	remote := c.RemoteAddr().String()
	if err := c.SetDeadline(time.Now().Add(HeaderTimeout)); err != nil {
		return
	}
	tc := tls.Server(c, s.store.ServerConfig())
	if err := tc.HandshakeContext(s.ctx); err != nil {
		klog.V(2).InfoS("Migration proxy refused a connection: TLS handshake", "remote", remote, "err", err)
		return
	}
	certs := tc.ConnectionState().VerifiedChains
	if len(certs) == 0 || len(certs[0]) == 0 {
		// RequireAndVerifyClientCert makes this unreachable; never
		// rely on that alone.
		klog.InfoS("Migration proxy refused a connection: no verified client certificate", "remote", remote)
		return
	}
	peer := certs[0][0].Subject.CommonName
	h, err := ReadHeader(tc)
	if err != nil {
		klog.InfoS("Migration proxy refused a connection: header", "remote", remote, "peer", peer, "err", err)
		if errors.Is(err, errBadHeader) {
			writeStatus(tc, StatusBadHeader)
		}
		return
	}
	s.conns.setUID(sess, h.UID)
	dial, status := s.route(h, peer)
	if status != StatusOK {
		klog.InfoS("Migration proxy refused a connection", "remote", remote, "peer", peer, "migrationUID", h.UID, "channel", h.Channel, "reason", status.String())
		writeStatus(tc, status)
		return
	}
	dctx, cancel := context.WithTimeout(s.ctx, dialTimeout)
	uc, err := dial(dctx)
	cancel()
	if err != nil {
		klog.ErrorS(err, "Migration proxy could not reach the local socket", "migrationUID", h.UID, "channel", h.Channel)
		writeStatus(tc, StatusUnavailable)
		return
	}
	if !sess.attach(uc) {
		return
	}
	if !writeStatus(tc, StatusOK) {
		return
	}
	if err := c.SetDeadline(time.Time{}); err != nil {
		return
	}
	klog.V(2).InfoS("Migration proxy splicing", "remote", remote, "peer", peer, "migrationUID", h.UID, "channel", h.Channel)
	in, out, err := splice(tc, uc)
	klog.V(2).InfoS("Migration proxy splice ended", "migrationUID", h.UID, "channel", h.Channel, "bytesIn", in, "bytesOut", out, "err", err)
}

func writeStatus(c net.Conn, st Status) bool {
	_, err := c.Write([]byte{byte(st)})
	return err == nil
}
