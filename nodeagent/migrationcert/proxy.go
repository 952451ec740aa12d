package migrationcert

import (
	"context"
	"crypto/x509"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/kube/certrequest"
	"github.com/kemu-dev/kemu/nodeagent/migrationproxy"
)

// Proxy is the node's migration proxy: its Server listens once the node's
// first certificate is issued, and Run renews the certificate (Store) for
// as long as it runs. The node agent's VMI reconcile registers incoming
// migrations with Server().Register and opens outgoing ones with
// migrationproxy.ListenSource(..., Store()), after Ready.
type Proxy struct {
	cfg    Config
	addr   string
	ready  chan struct{}
	store  *migrationproxy.Store
	server *migrationproxy.Server
}

// NewProxy returns the proxy of cfg.NodeName, to listen on addr
// (migrationproxy.DefaultAddr when empty).
func NewProxy(cfg Config, addr string) (*Proxy, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if addr == "" {
		addr = migrationproxy.DefaultAddr
	}
	return &Proxy{cfg: cfg, addr: addr, ready: make(chan struct{})}, nil
}

// Ready is closed once Server and Store are set.
func (p *Proxy) Ready() <-chan struct{} { return p.ready }

// Server is the listening proxy server; nil before Ready.
func (p *Proxy) Server() *migrationproxy.Server {
	select {
	case <-p.ready:
		return p.server
	default:
		return nil
	}
}

// Store is the node's current TLS material; nil before Ready.
func (p *Proxy) Store() *migrationproxy.Store {
	select {
	case <-p.ready:
		return p.store
	default:
		return nil
	}
}

// Run gets the first certificate (retrying with back-off), listens, and
// renews the certificate at two thirds of its life until ctx ends; a
// failed renewal retries while the current certificate keeps serving.
// The server is closed when Run returns.
func (p *Proxy) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("node", p.cfg.NodeName)
	ctx = klog.NewContext(ctx, logger)
	defer func() {
		if p.server != nil {
			_ = p.server.Close()
		}
	}()
	return certrequest.Keep(ctx, func(ctx context.Context) (*migrationproxy.Material, error) {
		return Request(ctx, p.cfg)
	}, func(m *migrationproxy.Material) (*x509.Certificate, error) {
		if p.store != nil {
			return m.Leaf(), p.store.Reload(m)
		}
		store := migrationproxy.NewStore(m)
		server, err := migrationproxy.Listen(ctx, p.addr, store)
		if err != nil {
			return nil, fmt.Errorf("migration proxy on %s: %w", p.addr, err)
		}
		p.store, p.server = store, server
		close(p.ready)
		logger.Info("Migration proxy listening", "addr", server.Addr().String())
		return m.Leaf(), nil
	})
}
