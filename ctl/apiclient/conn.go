package apiclient

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	gwebsocket "github.com/gorilla/websocket"

	"github.com/kemu-dev/kemu/api/subresources"
)

// ClosedError is how a stream ended when kemu-api closed it: the close
// frame's reason (kemu-api says why: the VMI stopped, kemu-api is shutting
// down…).
type ClosedError struct {
	Code   int
	Reason string
}

func (e *ClosedError) Error() string {
	if e.Reason == "" {
		return fmt.Sprintf("the stream was closed (code %d)", e.Code)
	}
	return "the stream was closed: " + e.Reason
}

// Conn is a stream as an io.ReadWriteCloser: binary WebSocket messages
// both ways. Read returns a *ClosedError when kemu-api closed the stream,
// another error when the connection broke.
type Conn struct {
	ws  *gwebsocket.Conn
	cur io.Reader
	wmu sync.Mutex
}

func newConn(ws *gwebsocket.Conn) *Conn { return &Conn{ws: ws} }

// Read implements io.Reader.
func (c *Conn) Read(p []byte) (int, error) {
	for {
		if c.cur != nil {
			n, err := c.cur.Read(p)
			if errors.Is(err, io.EOF) {
				c.cur = nil
				if n > 0 {
					return n, nil
				}
				continue
			}
			return n, err
		}
		typ, r, err := c.ws.NextReader()
		if err != nil {
			var ce *gwebsocket.CloseError
			if errors.As(err, &ce) {
				return 0, &ClosedError{Code: ce.Code, Reason: ce.Text}
			}
			return 0, fmt.Errorf("the stream broke: %w", err)
		}
		if typ == gwebsocket.BinaryMessage || typ == gwebsocket.TextMessage {
			c.cur = r
		}
	}
}

// Write implements io.Writer: binary messages of at most
// subresources.MaxStreamMessage bytes.
func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	n := 0
	for n < len(p) {
		m := min(len(p)-n, subresources.MaxStreamMessage)
		if err := c.ws.WriteMessage(gwebsocket.BinaryMessage, p[n:n+m]); err != nil {
			return n, err
		}
		n += m
	}
	return n, nil
}

// LocalAddr, RemoteAddr and the deadlines make a Conn a net.Conn (an RFB
// client takes one).
func (c *Conn) LocalAddr() net.Addr  { return c.ws.LocalAddr() }
func (c *Conn) RemoteAddr() net.Addr { return c.ws.RemoteAddr() }

// SetDeadline sets both deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	return errors.Join(c.ws.SetReadDeadline(t), c.ws.SetWriteDeadline(t))
}

// SetReadDeadline implements net.Conn.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.ws.SetReadDeadline(t) }

// SetWriteDeadline implements net.Conn.
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.ws.SetWriteDeadline(t) }

var _ net.Conn = (*Conn)(nil)

// Close sends a normal close frame and closes the connection.
func (c *Conn) Close() error {
	msg := gwebsocket.FormatCloseMessage(gwebsocket.CloseNormalClosure, "")
	_ = c.ws.WriteControl(gwebsocket.CloseMessage, msg, time.Now().Add(time.Second))
	return c.ws.Close()
}
