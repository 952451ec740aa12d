package migrationcert

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

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
	m, err := p.obtain(ctx)
	if err != nil {
		return nil // ctx ended
	}
	store := migrationproxy.NewStore(m)
	server, err := migrationproxy.Listen(ctx, p.addr, store)
	if err != nil {
		return fmt.Errorf("migration proxy on %s: %w", p.addr, err)
	}
	defer server.Close()
	p.store, p.server = store, server
	close(p.ready)
	logger.Info("Migration proxy listening", "addr", server.Addr().String())
	for {
		leaf := store.Current().Leaf()
		timer := time.NewTimer(time.Until(RenewAt(leaf.NotBefore, leaf.NotAfter)))
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C:
		}
		m, err := p.obtain(ctx)
		if err != nil {
			return nil // ctx ended
		}
		if err := store.Reload(m); err != nil {
			return err
		}
	}
}

// obtain requests a certificate until one is issued or ctx ends.
func (p *Proxy) obtain(ctx context.Context) (*migrationproxy.Material, error) {
	var m *migrationproxy.Material
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: time.Minute}
	err := wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		var err error
		if m, err = Request(ctx, p.cfg); err != nil {
			klog.FromContext(ctx).Error(err, "Migration certificate not issued, retrying")
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return nil, errors.Join(err, ctx.Err())
	}
	return m, nil
}

// RenewAt is when a certificate valid from notBefore to notAfter is
// renewed: at two thirds of its life.
func RenewAt(notBefore, notAfter time.Time) time.Time {
	return notBefore.Add(notAfter.Sub(notBefore) * 2 / 3)
}
