package migrationproxy

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Two node agents with their own certificates from one CA migrate to each
// other: every channel carries data both ways, with half-close.
func TestTwoNodesAllChannelsBothWays(t *testing.T) {
	ca := newTestCA(t)
	nodes := []testNode{newTestNode(t, ca, "node-a"), newTestNode(t, ca, "node-b")}
	servers := []*Server{startServer(t, nodes[0]), startServer(t, nodes[1])}
	payload := make([]byte, 3<<20+17)
	rand.Read(payload)

	for from := range 2 {
		to := 1 - from
		uid := testUID[:len(testUID)-1] + string(rune('0'+from))
		targetDir := t.TempDir()
		sockets := map[string]string{}
		for _, ch := range Channels {
			u := startUnixTarget(t, targetDir, ch+".sock", digestHandler(nodes[to].name+"/"+ch))
			sockets[ch] = u.path
		}
		if err := servers[to].Register(uid, nodes[from].name, sockets); err != nil {
			t.Fatal(err)
		}
		src, err := ListenSource(context.Background(), t.TempDir(), uid, Channels, targetOf(servers[to], nodes[to]), nodes[from].store)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { src.Close() })
		for _, ch := range Channels {
			t.Run(nodes[from].name+"->"+nodes[to].name+"/"+ch, func(t *testing.T) {
				c := dialUnix(t, src.Paths()[ch])
				got := exchange(t, c, payload)
				if want := digestReply(payload, nodes[to].name+"/"+ch); got != want {
					t.Fatalf("reply %q, want %q", got, want)
				}
			})
		}
	}
}

// A connection is refused, closed before a byte reaches the unix socket,
// unless the client has a certificate of the migration CA for the
// migration's source node, speaks TLS 1.3 and sends a valid header naming
// a registered migration and channel.
func TestRefused(t *testing.T) {
	ca := newTestCA(t)
	a, b := newTestNode(t, ca, "node-a"), newTestNode(t, ca, "node-b")
	c := newTestNode(t, ca, "node-c")
	foreign := newTestNode(t, newTestCA(t), "node-a")
	goodHeader := func(uid, ch string) []byte {
		h, err := Header{UID: uid, Channel: ch}.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	raw := func(uidLen int, uid string, chLen int, ch string) []byte {
		b := []byte(headerMagic)
		b = append(b, headerVersion, byte(uidLen))
		b = append(b, uid...)
		b = append(b, byte(chLen))
		return append(b, ch...)
	}
	clientCfg := func(n testNode) *tls.Config { return n.store.ClientConfig(b.name) }
	// A foreign client that trusts the server (so only the server's
	// check of its certificate can stop it).
	foreignCert := func() *tls.Config {
		c := b.store.ClientConfig(b.name)
		m := foreign.store.Current()
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &m.cert, nil }
		return c
	}
	noCert := func() *tls.Config {
		c := b.store.ClientConfig(b.name)
		c.GetClientCertificate = nil
		return c
	}
	tls12 := func() *tls.Config {
		c := a.store.ClientConfig(b.name)
		c.MinVersion, c.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
		c.GetClientCertificate = nil
		c.Certificates = []tls.Certificate{a.store.Current().cert}
		return c
	}
	long := strings.Repeat("a", MaxUIDLen+1)
	tests := []struct {
		name   string
		cfg    *tls.Config
		header []byte
	}{
		{"certificate of another CA", foreignCert(), goodHeader(testUID, ChannelMain)},
		{"no client certificate", noCert(), goodHeader(testUID, ChannelMain)},
		{"another node than the source", clientCfg(c), goodHeader(testUID, ChannelMain)},
		{"TLS 1.2", tls12(), goodHeader(testUID, ChannelMain)},
		{"unknown UID", clientCfg(a), goodHeader("0000-unknown", ChannelMain)},
		{"channel not registered", clientCfg(a), goodHeader(testUID, ChannelControl)},
		{"UID too long", clientCfg(a), raw(len(long), long, 4, "main")},
		{"UID length zero", clientCfg(a), raw(0, "", 4, "main")},
		{"UID upper case", clientCfg(a), raw(len(testUID), strings.ToUpper(testUID), 4, "main")},
		{"UID with a slash", clientCfg(a), raw(6, "../abc", 4, "main")},
		{"unknown channel", clientCfg(a), raw(len(testUID), testUID, 5, "debug")},
		{"channel too long", clientCfg(a), raw(len(testUID), testUID, 17, strings.Repeat("m", 17))},
		{"bad magic", clientCfg(a), append([]byte("XMIG"), goodHeader(testUID, ChannelMain)[4:]...)},
		{"bad version", clientCfg(a), append([]byte("KMIG\x02"), goodHeader(testUID, ChannelMain)[5:]...)},
		{"truncated header", clientCfg(a), goodHeader(testUID, ChannelMain)[:10]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startServer(t, b)
			dir := t.TempDir()
			main := startUnixTarget(t, dir, "main.sock", echoHandler)
			disk := startUnixTarget(t, dir, "disk.sock", echoHandler)
			if err := srv.Register(testUID, "node-a", map[string]string{ChannelMain: main.path, ChannelDisk: disk.path}); err != nil {
				t.Fatal(err)
			}
			c, err := net.Dial("tcp", srv.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			tc := tls.Client(c, tt.cfg)
			tc.SetDeadline(time.Now().Add(30 * time.Second))
			if err := tc.Handshake(); err == nil {
				tc.Write(tt.header)
				if strings.HasPrefix(tt.name, "truncated") {
					tc.CloseWrite()
				}
				tc.Write([]byte("data that must not reach QEMU"))
				var st [1]byte
				if _, err := io.ReadFull(tc, st[:]); err == nil && Status(st[0]) == StatusOK {
					t.Fatal("server accepted the connection")
				}
			}
			assertClosed(t, tc)
			main.assertNoAccept(t)
			disk.assertNoAccept(t)
		})
	}
}

// Dial refuses a server whose certificate is not for the target node.
func TestDialVerifiesServerName(t *testing.T) {
	ca := newTestCA(t)
	a, b := newTestNode(t, ca, "node-a"), newTestNode(t, ca, "node-b")
	srv := startServer(t, b)
	u := startUnixTarget(t, t.TempDir(), "main.sock", echoHandler)
	if err := srv.Register(testUID, "node-a", map[string]string{ChannelMain: u.path}); err != nil {
		t.Fatal(err)
	}
	_, err := Dial(context.Background(), a.store, Target{Addr: srv.Addr().String(), Node: "node-c"}, testUID, ChannelMain)
	if err == nil || !strings.Contains(err.Error(), "node-c") {
		t.Fatalf("Dial to node-b as node-c: err %v, want a name mismatch", err)
	}
	u.assertNoAccept(t)
}

// Dial reports the server's refusal.
func TestDialReportsRefusal(t *testing.T) {
	ca := newTestCA(t)
	a, b := newTestNode(t, ca, "node-a"), newTestNode(t, ca, "node-b")
	srv := startServer(t, b)
	dir := t.TempDir()
	if err := srv.Register(testUID, "node-a", map[string]string{ChannelMain: dir + "/absent.sock"}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		uid, channel string
		want         Status
	}{
		{"1234", ChannelMain, StatusUnknownMigration},
		{testUID, ChannelDisk, StatusUnknownChannel},
		{testUID, ChannelMain, StatusUnavailable},
	}
	for _, tt := range tests {
		_, err := Dial(context.Background(), a.store, targetOf(srv, b), tt.uid, tt.channel)
		if err == nil || !strings.Contains(err.Error(), tt.want.String()) {
			t.Errorf("Dial %s/%s: err %v, want %q", tt.uid, tt.channel, err, tt.want)
		}
	}
}

func TestRegisterValidates(t *testing.T) {
	srv := startServer(t, newTestNode(t, newTestCA(t), "node-b"))
	tests := []struct {
		name    string
		uid     string
		peer    string
		sockets map[string]string
	}{
		{"bad UID", "ABC", "node-a", map[string]string{ChannelMain: "/run/x.sock"}},
		{"no source node", testUID, "", map[string]string{ChannelMain: "/run/x.sock"}},
		{"unknown channel", testUID, "node-a", map[string]string{"debug": "/run/x.sock"}},
		{"relative path", testUID, "node-a", map[string]string{ChannelMain: "x.sock"}},
	}
	for _, tt := range tests {
		if err := srv.Register(tt.uid, tt.peer, tt.sockets); err == nil {
			t.Errorf("%s: Register succeeded", tt.name)
		}
	}
}

// Unregister ends the migration's splices and only them.
func TestUnregisterEndsSplices(t *testing.T) {
	ca := newTestCA(t)
	a, b := newTestNode(t, ca, "node-a"), newTestNode(t, ca, "node-b")
	srv := startServer(t, b)
	other := "other-" + testUID[6:]
	var conns []*tls.Conn
	for _, uid := range []string{testUID, other} {
		u := startUnixTarget(t, t.TempDir(), "main.sock", echoHandler)
		if err := srv.Register(uid, "node-a", map[string]string{ChannelMain: u.path}); err != nil {
			t.Fatal(err)
		}
		c, err := Dial(context.Background(), a.store, targetOf(srv, b), uid, ChannelMain)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		echoOnce(t, c, "before")
		conns = append(conns, c)
	}
	srv.Unregister(testUID)
	assertClosed(t, conns[0])
	echoOnce(t, conns[1], "after")
	if _, err := Dial(context.Background(), a.store, targetOf(srv, b), testUID, ChannelMain); err == nil {
		t.Fatal("Dial after Unregister succeeded")
	}
}

func echoOnce(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != msg {
		t.Fatalf("echo %q: got %q, %v", msg, got, err)
	}
	c.SetDeadline(time.Time{})
}

// Close of the server and the source ends every splice and leaks no
// goroutine.
func TestCloseEndsEverything(t *testing.T) {
	before := runtime.NumGoroutine()
	ca := newTestCA(t)
	a, b := newTestNode(t, ca, "node-a"), newTestNode(t, ca, "node-b")
	srv, err := Listen(context.Background(), "127.0.0.1:0", b.store)
	if err != nil {
		t.Fatal(err)
	}
	u := startUnixTarget(t, t.TempDir(), "main.sock", echoHandler)
	if err := srv.Register(testUID, "node-a", map[string]string{ChannelMain: u.path}); err != nil {
		t.Fatal(err)
	}
	srcDir := t.TempDir()
	src, err := ListenSource(context.Background(), srcDir, testUID, []string{ChannelMain}, targetOf(srv, b), a.store)
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	for range 3 {
		c := dialUnix(t, src.Paths()[ChannelMain])
		echoOnce(t, c, "hello")
		conns = append(conns, c)
	}
	direct, err := Dial(context.Background(), a.store, targetOf(srv, b), testUID, ChannelMain)
	if err != nil {
		t.Fatal(err)
	}
	echoOnce(t, direct, "direct")
	conns = append(conns, direct)

	srv.Close()
	for _, c := range conns {
		assertClosed(t, c)
	}
	if _, err := net.Dial("tcp", srv.Addr().String()); err == nil {
		t.Fatal("the server still accepts after Close")
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range conns {
		c.Close()
	}
	u.close()
	waitFor(t, "every goroutine to end", func() bool { return runtime.NumGoroutine() <= before })
}

// Cancelling the server's context stops it as Close does.
func TestContextStopsServer(t *testing.T) {
	ca := newTestCA(t)
	a, b := newTestNode(t, ca, "node-a"), newTestNode(t, ca, "node-b")
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := Listen(ctx, "127.0.0.1:0", b.store)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	u := startUnixTarget(t, t.TempDir(), "main.sock", echoHandler)
	if err := srv.Register(testUID, "node-a", map[string]string{ChannelMain: u.path}); err != nil {
		t.Fatal(err)
	}
	c, err := Dial(context.Background(), a.store, targetOf(srv, b), testUID, ChannelMain)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	echoOnce(t, c, "x")
	cancel()
	assertClosed(t, c)
	waitFor(t, "the listener to close", func() bool {
		c, err := net.Dial("tcp", srv.Addr().String())
		if err == nil {
			c.Close()
		}
		return err != nil
	})
}
