package vmi

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestSocketWatch(t *testing.T) {
	keys := make(chan string, 4)
	w, err := newSocketWatch(func(key string) { keys <- key })
	if err != nil {
		t.Fatal(err)
	}
	go w.Run()
	defer w.Close()
	expect := func(want string) {
		t.Helper()
		select {
		case k := <-keys:
			if k != want {
				t.Fatalf("notified %q, want %q", k, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no notification for %q", want)
		}
	}
	waitLen := func(n int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for w.Len() != n {
			if time.Now().After(deadline) {
				t.Fatalf("%d watches, want %d", w.Len(), n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	// The launcher's way: launcher-init.sock, then renamed launcher.sock.
	dir := t.TempDir()
	sock := filepath.Join(dir, "launcher.sock")
	if err := w.Watch(sock, "ns/a"); err != nil {
		t.Fatal(err)
	}
	if err := w.Watch(sock, "ns/a"); err != nil || w.Len() != 1 {
		t.Fatalf("a second Watch of the same socket: %v, %d watches", err, w.Len())
	}
	if err := os.WriteFile(filepath.Join(dir, "launcher-init.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "launcher-init.sock"), sock); err != nil {
		t.Fatal(err)
	}
	expect("ns/a")
	waitLen(0)
	select {
	case k := <-keys:
		t.Fatalf("notified %q for launcher-init.sock", k)
	default:
	}

	// A directory that goes away takes its watch.
	gone := filepath.Join(t.TempDir(), "sockets")
	if err := os.Mkdir(gone, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := w.Watch(filepath.Join(gone, "launcher.sock"), "ns/b"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	waitLen(0)

	// No directory yet: no watch, the caller polls.
	if err := w.Watch(filepath.Join(t.TempDir(), "missing", "launcher.sock"), "ns/c"); err == nil {
		t.Error("a watch on a missing directory")
	}
	// A symlinked directory is not followed.
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if err := w.Watch(filepath.Join(link, "launcher.sock"), "ns/d"); err == nil {
		t.Error("a watch through a symlinked directory")
	}
	// Forget.
	d2 := t.TempDir()
	if err := w.Watch(filepath.Join(d2, "launcher.sock"), "ns/e"); err != nil {
		t.Fatal(err)
	}
	w.Forget(filepath.Join(d2, "launcher.sock"))
	if err := os.WriteFile(filepath.Join(d2, "launcher.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	waitLen(0)
	select {
	case k := <-keys:
		t.Fatalf("notified %q after Forget", k)
	case <-time.After(200 * time.Millisecond):
	}
}
