package migrationproxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestSourceSockets(t *testing.T) {
	ca := newTestCA(t)
	a, b := newTestNode(t, ca, "node-a"), newTestNode(t, ca, "node-b")
	srv := startServer(t, b)
	dir := t.TempDir()
	// A stale socket from an earlier attempt is replaced.
	if err := os.WriteFile(filepath.Join(dir, SocketName(ChannelMain)), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := ListenSource(context.Background(), dir, testUID, Channels, targetOf(srv, b), a.store)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range Channels {
		p := src.Paths()[ch]
		if p != filepath.Join(dir, "migration-"+ch+".sock") {
			t.Errorf("channel %s at %s", ch, p)
		}
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want a socket 0600", p, fi.Mode())
		}
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Fatalf("left after Close: %v", entries)
	}
}

func TestListenSourceRefused(t *testing.T) {
	store := newTestNode(t, newTestCA(t), "node-a").store
	tests := []struct {
		name     string
		dir      string
		uid      string
		channels []string
	}{
		{"bad UID", t.TempDir(), "A B", Channels},
		{"unknown channel", t.TempDir(), testUID, []string{ChannelMain, "debug"}},
		{"channel twice", t.TempDir(), testUID, []string{ChannelMain, ChannelMain}},
		{"no directory", filepath.Join(t.TempDir(), "absent"), testUID, Channels},
	}
	for _, tt := range tests {
		if _, err := ListenSource(context.Background(), tt.dir, tt.uid, tt.channels, Target{Addr: "127.0.0.1:1", Node: "node-b"}, store); err == nil {
			t.Errorf("%s: ListenSource succeeded", tt.name)
		}
		entries, _ := os.ReadDir(tt.dir)
		if len(entries) != 0 {
			t.Errorf("%s: left %v", tt.name, entries)
		}
	}
}

// A source whose target refuses closes the local connection: QEMU sees
// the channel fail instead of writing into nothing.
func TestSourceTargetRefuses(t *testing.T) {
	ca := newTestCA(t)
	a, b := newTestNode(t, ca, "node-a"), newTestNode(t, ca, "node-b")
	srv := startServer(t, b) // nothing registered
	src, err := ListenSource(context.Background(), t.TempDir(), testUID, []string{ChannelMain}, targetOf(srv, b), a.store)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	c := dialUnix(t, src.Paths()[ChannelMain])
	assertClosed(t, c)
	if _, err := os.Stat(src.Paths()[ChannelMain]); errors.Is(err, os.ErrNotExist) {
		t.Fatal("a refused channel removed the socket")
	}
}

// The target may half-close first: the source sees EOF while it still
// sends, and everything it sends after arrives.
func TestTargetHalfClosesFirst(t *testing.T) {
	ca := newTestCA(t)
	a, b := newTestNode(t, ca, "node-a"), newTestNode(t, ca, "node-b")
	srv := startServer(t, b)
	received := make(chan string, 1)
	u := startUnixTarget(t, t.TempDir(), "control.sock", func(c *net.UnixConn) {
		c.Write([]byte("ready"))
		c.CloseWrite()
		h := sha256.New()
		io.Copy(h, c)
		received <- hex.EncodeToString(h.Sum(nil))
	})
	if err := srv.Register(testUID, "node-a", map[string]string{ChannelControl: u.path}); err != nil {
		t.Fatal(err)
	}
	src, err := ListenSource(context.Background(), t.TempDir(), testUID, []string{ChannelControl}, targetOf(srv, b), a.store)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	c := dialUnix(t, src.Paths()[ChannelControl])
	c.SetDeadline(time.Now().Add(time.Minute))
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "ready" {
		t.Fatalf("read %q, %v", got, err)
	}
	payload := bytes.Repeat([]byte("after the peer's EOF "), 100000)
	if _, err := c.Write(payload); err != nil {
		t.Fatal(err)
	}
	c.CloseWrite()
	sum := sha256.Sum256(payload)
	select {
	case d := <-received:
		if d != hex.EncodeToString(sum[:]) {
			t.Fatal("the target received other bytes")
		}
	case <-time.After(time.Minute):
		t.Fatal("the target never saw EOF")
	}
}
