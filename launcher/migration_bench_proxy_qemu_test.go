//go:build qemu

package launcher

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kemu-dev/kemu/nodeagent/migrationproxy"
)

// benchProxies is two node agents' migration proxies on loopback, node
// certificates from one CA, as in test/migration: the source's sockets
// on node-a, TLS 1.3 to node-b's listener, spliced to the target's.
type benchProxies struct {
	a, b  *migrationproxy.Store
	srv   *migrationproxy.Server
	count atomic.Int64
}

const (
	benchSourceNode = "node-a"
	benchTargetNode = "node-b"
)

func newBenchProxies(tb testing.TB) *benchProxies {
	tb.Helper()
	ca, err := migrationproxy.NewCA(time.Now())
	if err != nil {
		tb.Fatal(err)
	}
	p := &benchProxies{}
	for _, n := range []struct {
		name  string
		store **migrationproxy.Store
	}{{benchSourceNode, &p.a}, {benchTargetNode, &p.b}} {
		m, err := ca.IssueNode(n.name, time.Now())
		if err != nil {
			tb.Fatal(err)
		}
		*n.store = migrationproxy.NewStore(m)
	}
	p.srv, err = migrationproxy.Listen(context.Background(), "127.0.0.1:0", p.b)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.srv.Close() })
	return p
}

// path registers the target's sockets with node-b's proxy under a new
// migration UID and opens node-a's source sockets for it; the source
// launcher connects to those.
func (p *benchProxies) path(tb testing.TB, at MigrationTarget) MigrationTarget {
	tb.Helper()
	uid := fmt.Sprintf("bench-%d", p.count.Add(1))
	socks := map[string]string{migrationproxy.ChannelMain: at.MainSocket, migrationproxy.ChannelControl: at.ControlSocket}
	chans := []string{migrationproxy.ChannelMain, migrationproxy.ChannelControl}
	if at.DiskSocket != "" {
		socks[migrationproxy.ChannelDisk] = at.DiskSocket
		chans = append(chans, migrationproxy.ChannelDisk)
	}
	if err := p.srv.Register(uid, benchSourceNode, socks); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.srv.Unregister(uid) })
	target := migrationproxy.Target{Addr: p.srv.Addr().String(), Node: benchTargetNode}
	s, err := migrationproxy.ListenSource(context.Background(), shortDir(tb), uid, chans, target, p.a)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("close the source proxy: %v", err)
		}
	})
	paths := s.Paths()
	return MigrationTarget{MainSocket: paths[migrationproxy.ChannelMain], DiskSocket: paths[migrationproxy.ChannelDisk],
		ControlSocket: paths[migrationproxy.ChannelControl]}
}
