package rfb

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"

	"github.com/kemu-dev/kemu/launcher/rpc"
)

// DialLauncher opens the launcher's Vnc stream and returns it as a
// net.Conn (with deadlines) to speak RFB on: what is written goes to QEMU's
// VNC server, what it sends is read. The stream lives until the conn is
// closed or ctx ends. A stream that fails (FailedPrecondition without a
// graphics device, ResourceExhausted when the launcher serves too many)
// makes Read return its gRPC status.
func DialLauncher(ctx context.Context, client rpc.LauncherClient) (net.Conn, error) {
	sctx, cancel := context.WithCancel(ctx)
	stream, err := client.Vnc(sctx)
	if err != nil {
		cancel()
		return nil, err
	}
	local, remote := net.Pipe()
	c := &streamConn{Conn: local, cancel: cancel}
	go func() { // QEMU → the reader
		defer remote.Close()
		for {
			msg, err := stream.Recv()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					c.setErr(err)
				}
				return
			}
			if _, err := remote.Write(msg.GetData()); err != nil {
				cancel()
				return
			}
		}
	}()
	go func() { // the writer → QEMU
		buf := make([]byte, 32<<10)
		for {
			n, err := remote.Read(buf)
			if n > 0 {
				if stream.Send(&rpc.StreamData{Data: append([]byte(nil), buf[:n]...)}) != nil {
					return // Recv reports the stream's end
				}
			}
			if err != nil {
				stream.CloseSend()
				return
			}
		}
	}()
	return c, nil
}

// streamConn is the caller's end of the pipe; Read reports the stream's
// error once the pipe ends.
type streamConn struct {
	net.Conn
	cancel context.CancelFunc

	mu  sync.Mutex
	err error
}

func (c *streamConn) setErr(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
}

func (c *streamConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if errors.Is(err, io.EOF) {
		c.mu.Lock()
		if c.err != nil {
			err = c.err
		}
		c.mu.Unlock()
	}
	return n, err
}

func (c *streamConn) Close() error {
	err := c.Conn.Close()
	c.cancel()
	return err
}
