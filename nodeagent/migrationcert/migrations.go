package migrationcert

import (
	"context"
	"errors"
	"io"

	"github.com/kemu-dev/kemu/nodeagent/migrationproxy"
)

// ErrNotReady: the node has no migration certificate yet (the controller's
// signer has not answered), so it can neither take nor send a migration.
var ErrNotReady = errors.New("migration proxy: not ready (no node certificate yet)")

// RegisterDial routes an incoming migration's channels (the VMI
// reconcile's Migrations interface).
func (p *Proxy) RegisterDial(uid, sourceNode string, dials map[string]migrationproxy.DialFunc) error {
	s := p.Server()
	if s == nil {
		return ErrNotReady
	}
	return s.RegisterDial(uid, sourceNode, dials)
}

// Unregister drops an incoming migration's route.
func (p *Proxy) Unregister(uid string) {
	if s := p.Server(); s != nil {
		s.Unregister(uid)
	}
}

// ListenSource opens an outgoing migration's source sockets with the
// node's current certificate.
func (p *Proxy) ListenSource(ctx context.Context, dir, uid string, channels []string, target migrationproxy.Target) (io.Closer, error) {
	st := p.Store()
	if st == nil {
		return nil, ErrNotReady
	}
	return migrationproxy.ListenSource(ctx, dir, uid, channels, target, st)
}
