package nodeapi

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// fakeStream is a launcher stream: what the client sends is collected,
// out feeds recv, and recv ends with ctx like a gRPC stream.
type fakeStream struct {
	ctx    context.Context
	out    chan []byte
	end    chan error
	mu     sync.Mutex
	got    []byte
	closed bool
}

func (f *fakeStream) stream() *launcherStream {
	return &launcherStream{
		send: func(b []byte) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.got = append(f.got, b...)
			return f.ctx.Err()
		},
		recv: func() ([]byte, error) {
			select {
			case b := <-f.out:
				return b, nil
			case err := <-f.end:
				return nil, err
			case <-f.ctx.Done():
				return nil, f.ctx.Err()
			}
		},
		closeSend: func() error {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.closed = true
			return nil
		},
	}
}

func (f *fakeStream) received() (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return string(f.got), f.closed
}

// tcpPair is a connected loopback pair (half-close works).
func tcpPair(t *testing.T) (server, client *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return s.(*net.TCPConn), c.(*net.TCPConn)
}

func TestSplice(t *testing.T) {
	errQEMUGone := errors.New("QEMU is gone")
	for _, tt := range []struct {
		name string
		// run drives the client and the launcher; it returns what the
		// client must read before EOF.
		run  func(t *testing.T, f *fakeStream, client *net.TCPConn, cancel context.CancelCauseFunc) string
		want error
	}{
		{"the launcher's stream ends: output then EOF", func(t *testing.T, f *fakeStream, _ *net.TCPConn, _ context.CancelCauseFunc) string {
			f.out <- []byte("login: ")
			f.end <- errQEMUGone
			return "login: "
		}, errQEMUGone},
		{"the client half-closes: its input arrives, output goes on", func(t *testing.T, f *fakeStream, client *net.TCPConn, cancel context.CancelCauseFunc) string {
			if _, err := client.Write([]byte("root\n")); err != nil {
				t.Fatal(err)
			}
			if err := client.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for got, closed := f.received(); got != "root\n" || !closed; got, closed = f.received() {
				if time.Now().After(deadline) {
					t.Fatalf("launcher got %q, closeSend %v", got, closed)
				}
				time.Sleep(10 * time.Millisecond)
			}
			f.out <- []byte("after")
			cancel(errLauncherGone)
			return "after"
		}, errLauncherGone},
		{"a newer connection", func(t *testing.T, f *fakeStream, _ *net.TCPConn, cancel context.CancelCauseFunc) string {
			cancel(errReplaced)
			return ""
		}, errReplaced},
		{"the client goes away", func(t *testing.T, f *fakeStream, client *net.TCPConn, _ context.CancelCauseFunc) string {
			_ = client.SetLinger(0)
			_ = client.Close()
			return ""
		}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			server, client := tcpPair(t)
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			f := &fakeStream{ctx: ctx, out: make(chan []byte), end: make(chan error, 1)}
			done := make(chan error, 1)
			go func() { done <- splice(ctx, cancel, server, bufio.NewReader(server), f.stream()) }()
			want := tt.run(t, f, client, cancel)
			if want != "" || tt.want != nil {
				_ = client.SetReadDeadline(time.Now().Add(10 * time.Second))
				got, err := io.ReadAll(client)
				if err != nil || string(got) != want {
					t.Errorf("client read %q, %v; want %q then EOF", got, err, want)
				}
			}
			select {
			case err := <-done:
				if tt.want != nil && !errors.Is(err, tt.want) {
					t.Errorf("reason %v, want %v", err, tt.want)
				}
				if tt.want == nil && err == nil {
					t.Error("no reason")
				}
			case <-time.After(10 * time.Second):
				t.Fatal("splice did not return")
			}
		})
	}
}
