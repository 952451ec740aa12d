//go:build qemu

package nodeapi

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kemu-dev/kemu/kube/nodeapi"
	"github.com/kemu-dev/kemu/launcher"
	"github.com/kemu-dev/kemu/launcher/cmdserver"
	"github.com/kemu-dev/kemu/launcher/rpc"
	"github.com/kemu-dev/kemu/nodeagent/migrationproxy"
	"github.com/kemu-dev/kemu/nodeagent/vmi"
	"github.com/kemu-dev/kemu/test/testguest"
)

const (
	bootTimeout = 120 * time.Second
	stepTimeout = 60 * time.Second
	node        = "node-a"
)

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// startLauncher serves a launcher command server (what kemu-launcher
// runs) and returns it with a client on its socket.
func startLauncher(t *testing.T) (*cmdserver.Server, rpc.LauncherClient) {
	t.Helper()
	root, err := testguest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testguest.Paths(); err != nil {
		t.Fatal(err)
	}
	base := testguest.TempDir(t, "kemu-na-")
	s := cmdserver.New(cmdserver.Options{SocketsDir: filepath.Join(base, "s"), Config: launcher.Config{
		Dir: filepath.Join(base, "run"), ImageCache: filepath.Join(base, "cache"), BaseDir: root, Accel: "tcg"}})
	if err := s.Start(ctxFor(t, stepTimeout)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	t.Cleanup(func() {
		if l := s.Launcher(); l != nil {
			if _, err := l.Kill(ctxFor(t, stepTimeout)); err != nil {
				t.Errorf("kill: %v", err)
			}
		}
	})
	conn, err := grpc.NewClient("unix://"+s.Socket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return s, rpc.NewLauncherClient(conn)
}

// launchers is the node agent's lookup (nodeagent/vmi's CurrentLauncher)
// for one VMI and its launcher: the domain's state read from the
// launcher, the entry's context ended by drop.
type launchers struct {
	ns, name string
	uid      types.UID
	client   rpc.LauncherClient

	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelFunc
}

func newLaunchers(ns, name string, uid types.UID, c rpc.LauncherClient) *launchers {
	l := &launchers{ns: ns, name: name, uid: uid, client: c}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	return l
}

func (l *launchers) CurrentLauncher(namespace, name string) (vmi.APILauncher, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if namespace != l.ns || name != l.name || l.ctx.Err() != nil {
		return vmi.APILauncher{}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, _ := l.client.GetDomain(ctx, &rpc.Empty{})
	return vmi.APILauncher{VMIUID: l.uid, Client: l.client, Ctx: l.ctx, State: d.GetDomain().GetState(),
		AgentConnected: d.GetDomain().GetAgentConnected()}, true
}

// drop ends the launcher's entry (its Pod deleted, the VMI handed over);
// readd makes a fresh one.
func (l *launchers) drop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cancel()
}

func (l *launchers) readd() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ctx, l.cancel = context.WithCancel(context.Background())
}

// pki is a test CA with the node's material and kemu-api's client
// certificate.
type pki struct {
	ca     *migrationproxy.CA
	node   *migrationproxy.Material
	client tls.Certificate
	pool   *x509.CertPool
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	ca, err := migrationproxy.NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	m, err := ca.IssueNode(node, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := ca.SignClient(&key.PublicKey, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return &pki{ca: ca, node: m, client: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool: pool}
}

// tlsConfig is kemu-api's side: the node's certificate verified for
// node's name, cert as the client certificate.
func (p *pki) tlsConfig(cert tls.Certificate) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: p.pool, ServerName: node, Certificates: []tls.Certificate{cert}}
}

// get calls verb on the VMI as kemu-api (client cert) does.
func get(ctx context.Context, addr string, cfg *tls.Config, ns, name, uid, verb string) (*http.Response, []byte, error) {
	tr := &http.Transport{TLSClientConfig: cfg}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+nodeapi.Path(ns, name, verb), nil)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set(nodeapi.UIDHeader, uid)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp, body, err
}

// stream is an upgraded console or vnc connection.
type stream struct {
	conn *tls.Conn
	r    *bufio.Reader
}

func (s *stream) Read(b []byte) (int, error) { return s.r.Read(b) }

// openStream upgrades verb on the VMI; a refusal returns the status and
// body.
func openStream(ctx context.Context, addr string, cfg *tls.Config, ns, name, uid, verb string) (*stream, int, error) {
	d := tls.Dialer{Config: cfg}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, 0, err
	}
	conn := c.(*tls.Conn)
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\n%s: %s\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n",
		nodeapi.Path(ns, name, verb), node, nodeapi.UIDHeader, uid, nodeapi.StreamUpgrade)
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		conn.Close()
		return nil, 0, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		conn.Close()
		return nil, resp.StatusCode, fmt.Errorf("status %d: %s", resp.StatusCode, body)
	}
	return &stream{conn: conn, r: r}, resp.StatusCode, nil
}

// waitEOF reads s until it ends; it fails on a timeout.
func waitEOF(t *testing.T, s *stream, what string) {
	t.Helper()
	_ = s.conn.SetReadDeadline(time.Now().Add(stepTimeout))
	if _, err := io.Copy(io.Discard, s); err != nil {
		t.Errorf("%s: the stream did not end cleanly: %v", what, err)
	}
}
