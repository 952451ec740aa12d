package migrationproxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const testUID = "3f1c2a9e-7b7d-4c44-9a35-0d3b2f6f0e11"

// testNode is one "node agent": its material and store.
type testNode struct {
	name  string
	store *Store
}

func newTestCA(t testing.TB) *CA {
	t.Helper()
	ca, err := NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func newTestNode(t testing.TB, ca *CA, name string) testNode {
	t.Helper()
	m, err := ca.IssueNode(name, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return testNode{name: name, store: NewStore(m)}
}

func startServer(t testing.TB, n testNode) *Server {
	t.Helper()
	s, err := Listen(context.Background(), "127.0.0.1:0", n.store)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func targetOf(s *Server, n testNode) Target {
	return Target{Addr: s.Addr().String(), Node: n.name}
}

// unixTarget is a launcher's unix socket: it records every accepted
// connection and runs handle on it.
type unixTarget struct {
	path    string
	ln      *net.UnixListener
	accepts atomic.Int64
	wg      sync.WaitGroup
}

func startUnixTarget(t testing.TB, dir, name string, handle func(*net.UnixConn)) *unixTarget {
	t.Helper()
	path := filepath.Join(dir, name)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	u := &unixTarget{path: path, ln: ln}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			u.accepts.Add(1)
			u.wg.Add(1)
			go func() {
				defer u.wg.Done()
				defer c.Close()
				handle(c)
			}()
		}
	}()
	t.Cleanup(u.close)
	return u
}

func (u *unixTarget) close() {
	u.ln.Close()
	u.wg.Wait()
}

// assertNoAccept proves that nothing but a probe reached the socket:
// accepts are in order, so once the probe is counted every earlier
// connection would be too.
func (u *unixTarget) assertNoAccept(t *testing.T) {
	t.Helper()
	before := u.accepts.Load()
	probe, err := net.Dial("unix", u.path)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	waitFor(t, "the probe's accept", func() bool { return u.accepts.Load() > before })
	if n := u.accepts.Load(); n != 1 || before != 0 {
		t.Fatalf("the unix socket accepted %d connections besides the probe, want 0", n-1)
	}
}

// digestHandler reads to EOF, then answers with the sha256 of what it
// read and the tag, and closes: data both ways and half-close.
func digestHandler(tag string) func(*net.UnixConn) {
	return func(c *net.UnixConn) {
		h := sha256.New()
		if _, err := io.Copy(h, c); err != nil {
			return
		}
		c.Write([]byte(hex.EncodeToString(h.Sum(nil)) + "/" + tag))
	}
}

func echoHandler(c *net.UnixConn) { io.Copy(c, c) }

func digestReply(payload []byte, tag string) string {
	sum := sha256.Sum256(payload)
	return hex.EncodeToString(sum[:]) + "/" + tag
}

// exchange writes payload, half-closes, and returns everything read.
func exchange(t testing.TB, c halfConn, payload []byte) string {
	t.Helper()
	if err := c.SetDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(payload)
		if err == nil {
			err = c.CloseWrite()
		}
		errc <- err
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("write: %v", err)
	}
	return string(got)
}

// assertClosed waits until c's peer closed it (EOF or a reset).
func assertClosed(t testing.TB, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("connection still open after 30s")
	}
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func dialUnix(t testing.TB, path string) *net.UnixConn {
	t.Helper()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
