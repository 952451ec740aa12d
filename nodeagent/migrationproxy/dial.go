package migrationproxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"time"
)

// Target is the migration proxy of the node a migration goes to.
type Target struct {
	// Addr is the proxy's host:port.
	Addr string
	// Node is the node's name, which its certificate must carry.
	Node string
}

// Dial opens a channel of migration uid to target: TLS 1.3 with the
// store's node certificate, the server verified as target.Node against
// the migration CA, then the header; it returns once the target accepted
// the header, so every byte that follows is the channel's stream. The
// handshake and header are bounded by ctx and HeaderTimeout.
func Dial(ctx context.Context, store *Store, target Target, uid, channel string) (*tls.Conn, error) {
	hdr, err := Header{UID: uid, Channel: channel}.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("dial migration proxy %s: %w", target.Addr, err)
	}
	ctx, cancel := context.WithTimeout(ctx, HeaderTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", target.Addr)
	if err != nil {
		return nil, fmt.Errorf("dial migration proxy %s: %w", target.Addr, err)
	}
	tc, err := openChannel(ctx, c, store.ClientConfig(target.Node), hdr)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("migration %s channel %s via proxy %s (node %s): %w", uid, channel, target.Addr, target.Node, err)
	}
	return tc, nil
}

func openChannel(ctx context.Context, c net.Conn, cfg *tls.Config, hdr []byte) (*tls.Conn, error) {
	deadline, _ := ctx.Deadline()
	if err := c.SetDeadline(deadline); err != nil {
		return nil, err
	}
	// Closing c on ctx's end unblocks the reads and writes below.
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	tc := tls.Client(c, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, fmt.Errorf("TLS handshake: %w", err)
	}
	if _, err := tc.Write(hdr); err != nil {
		return nil, fmt.Errorf("send header: %w", err)
	}
	var st [1]byte
	if _, err := io.ReadFull(tc, st[:]); err != nil {
		// A TLS 1.3 server that refuses the client certificate does so
		// after the client's handshake completed: it shows here.
		return nil, fmt.Errorf("read answer: %w", err)
	}
	if Status(st[0]) != StatusOK {
		return nil, fmt.Errorf("refused: %s", Status(st[0]))
	}
	if !stop() {
		return nil, ctx.Err()
	}
	if err := c.SetDeadline(time.Time{}); err != nil {
		return nil, err
	}
	return tc, nil
}
