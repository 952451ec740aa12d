//go:build qemu

package migration

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kemu-dev/kemu/api/manifest"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/launcher"
	"github.com/kemu-dev/kemu/nodeagent/migrationproxy"
	"github.com/kemu-dev/kemu/test/testguest"
)

const (
	bootTimeout      = 120 * time.Second
	stepTimeout      = 60 * time.Second
	migrationTimeout = 180 * time.Second
	migrationUID     = "5b0e7c1a-2d4f-4e8b-9c3a-1f2e3d4c5b6a"
)

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func parseVMI(t testing.TB, yaml string) *v1.VirtualMachineInstance {
	t.Helper()
	docs, err := manifest.Read(strings.NewReader(yaml))
	if err != nil || len(docs) != 1 || len(docs[0].Errors) > 0 {
		t.Fatalf("manifest: %v (%d docs)", err, len(docs))
	}
	vmi := docs[0].Object.(*v1.VirtualMachineInstance)
	vmi.Namespace = "test"
	return vmi
}

func newConfig(t testing.TB, yaml string) launcher.Config {
	t.Helper()
	root, err := testguest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testguest.Paths(); err != nil {
		t.Fatal(err)
	}
	base := testguest.TempDir(t, "kemu-m-")
	return launcher.Config{VMI: parseVMI(t, yaml), Dir: filepath.Join(base, "run"), ImageCache: filepath.Join(base, "cache"),
		BaseDir: root, Accel: "tcg"}
}

// guest is a launcher with its console watched.
type guest struct {
	l   *launcher.Launcher
	cfg launcher.Config
	w   *testguest.Watcher
}

// newGuest creates a launcher for yaml, runs begin (Start or
// StartMigrationTarget) and watches its console; cleanup kills it.
func newGuest(t *testing.T, yaml string, begin func(context.Context, *launcher.Launcher) error) *guest {
	t.Helper()
	return startGuest(t, newConfig(t, yaml), begin)
}

// startGuest is newGuest for a Config the caller made.
func startGuest(t *testing.T, cfg launcher.Config, begin func(context.Context, *launcher.Launcher) error) *guest {
	t.Helper()
	l, err := launcher.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := begin(ctxFor(t, stepTimeout), l); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		if _, err := l.Kill(context.Background()); err != nil {
			t.Errorf("kill: %v", err)
		}
	})
	out, _, detach, err := l.Console()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(detach)
	return &guest{l: l, cfg: cfg, w: testguest.NewChanWatcher(out)}
}

func (g *guest) wait(t *testing.T, pred testguest.Predicate) testguest.Marker {
	t.Helper()
	m, err := g.w.Wait(ctxFor(t, bootTimeout), pred)
	if err != nil {
		t.Fatalf("console: %v\n%s", err, g.w.Log())
	}
	return m
}

func (g *guest) waitAfter(t *testing.T, seq int, pred testguest.Predicate) testguest.Marker {
	t.Helper()
	m, err := g.w.WaitAfter(ctxFor(t, bootTimeout), seq, pred)
	if err != nil {
		t.Fatalf("console: %v\n%s", err, g.w.Log())
	}
	return m
}

func waitDomain(t *testing.T, l *launcher.Launcher, what string, f func(launcher.Domain) bool) launcher.Domain {
	t.Helper()
	d, err := l.Watch(false).WaitFor(ctxFor(t, migrationTimeout), f)
	if err != nil {
		t.Fatalf("waiting for %s: %v (domain %s)", what, err, l.Domain())
	}
	return d
}

// node is one "node agent": its name, certificates and proxy Server.
type node struct {
	name  string
	store *migrationproxy.Store
	srv   *migrationproxy.Server
}

func newNode(t *testing.T, ca *migrationproxy.CA, name string) *node {
	t.Helper()
	m, err := ca.IssueNode(name, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	n := &node{name: name, store: migrationproxy.NewStore(m)}
	n.srv, err = migrationproxy.Listen(context.Background(), "127.0.0.1:0", n.store)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.srv.Close() })
	return n
}

func newCA(t *testing.T) *migrationproxy.CA {
	t.Helper()
	ca, err := migrationproxy.NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// proxied wires a migration from src (on from) to dst (on to): dst's
// sockets registered on to's proxy for from's node, from's source sockets
// in src's runtime directory. It returns the source's socket paths.
func proxied(t *testing.T, from, to *node, src *guest, at launcher.MigrationTarget) map[string]string {
	t.Helper()
	socks := map[string]string{migrationproxy.ChannelMain: at.MainSocket, migrationproxy.ChannelControl: at.ControlSocket}
	chans := []string{migrationproxy.ChannelMain, migrationproxy.ChannelControl}
	if at.DiskSocket != "" {
		socks[migrationproxy.ChannelDisk] = at.DiskSocket
		chans = append(chans, migrationproxy.ChannelDisk)
	}
	if err := to.srv.Register(migrationUID, from.name, socks); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { to.srv.Unregister(migrationUID) })
	target := migrationproxy.Target{Addr: to.srv.Addr().String(), Node: to.name}
	s, err := migrationproxy.ListenSource(context.Background(), src.cfg.Dir, migrationUID, chans, target, from.store)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close the source proxy: %v", err)
		}
	})
	return s.Paths()
}

func tickN(t *testing.T, m testguest.Marker) int64 {
	t.Helper()
	n, err := m.Int("n")
	if err != nil {
		t.Fatalf("tick %s: %v", m, err)
	}
	return n
}

// via is the target as the source reaches it through its proxy's sockets.
func via(paths map[string]string) launcher.MigrationTarget {
	return launcher.MigrationTarget{MainSocket: paths[migrationproxy.ChannelMain], DiskSocket: paths[migrationproxy.ChannelDisk],
		ControlSocket: paths[migrationproxy.ChannelControl]}
}
