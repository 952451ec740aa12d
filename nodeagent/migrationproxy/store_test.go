package migrationproxy

import (
	"context"
	"crypto/tls"
	"testing"
	"time"
)

// Store.Reload applies to new connections, on both ends, without a
// restart; an established connection keeps going.
func TestStoreReload(t *testing.T) {
	ca1, ca2 := newTestCA(t), newTestCA(t)
	a, b := newTestNode(t, ca1, "node-a"), newTestNode(t, ca1, "node-b")
	srv := startServer(t, b)
	u := startUnixTarget(t, t.TempDir(), "main.sock", echoHandler)
	if err := srv.Register(testUID, "node-a", map[string]string{ChannelMain: u.path}); err != nil {
		t.Fatal(err)
	}
	dial := func(n testNode) error {
		c, err := Dial(context.Background(), n.store, targetOf(srv, b), testUID, ChannelMain)
		if err == nil {
			echoOnce(t, c, "ping")
			c.Close()
		}
		return err
	}
	if err := dial(a); err != nil {
		t.Fatalf("before rotation: %v", err)
	}
	established, err := Dial(context.Background(), a.store, targetOf(srv, b), testUID, ChannelMain)
	if err != nil {
		t.Fatal(err)
	}
	defer established.Close()

	// The server rotates to ca2: a client still on ca1 is refused.
	reload(t, b, ca2)
	if err := dial(a); err == nil {
		t.Fatal("a client of the old CA was accepted after the server's rotation")
	}
	// The client rotates too: accepted again.
	reload(t, a, ca2)
	if err := dial(a); err != nil {
		t.Fatalf("after both rotated: %v", err)
	}
	echoOnce(t, established, "still there")
	if err := a.store.Reload(nil); err == nil {
		t.Fatal("Reload(nil) succeeded")
	}
}

func reload(t *testing.T, n testNode, ca *CA) {
	t.Helper()
	m, err := ca.IssueNode(n.name, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := n.store.Reload(m); err != nil {
		t.Fatal(err)
	}
}

// Nothing the package builds skips verification or allows TLS below 1.3.
func TestConfigsVerify(t *testing.T) {
	n := newTestNode(t, newTestCA(t), "node-a")
	srv := n.store.ServerConfig()
	perConn, err := srv.GetConfigForClient(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	cli := n.store.ClientConfig("node-b")
	for name, c := range map[string]*tls.Config{"server": srv, "server per connection": perConn, "client": cli} {
		if c.InsecureSkipVerify || c.MinVersion != tls.VersionTLS13 {
			t.Errorf("%s: InsecureSkipVerify %v, MinVersion %#x", name, c.InsecureSkipVerify, c.MinVersion)
		}
	}
	if perConn.ClientAuth != tls.RequireAndVerifyClientCert || perConn.ClientCAs == nil {
		t.Errorf("server: ClientAuth %v, ClientCAs set %v", perConn.ClientAuth, perConn.ClientCAs != nil)
	}
	if cli.ServerName != "node-b" || cli.RootCAs == nil {
		t.Errorf("client: ServerName %q, RootCAs set %v", cli.ServerName, cli.RootCAs != nil)
	}
}
