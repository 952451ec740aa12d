package rfb

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// Protocol versions the client speaks.
const (
	Version33 = "RFB 003.003\n"
	Version37 = "RFB 003.007\n"
	Version38 = "RFB 003.008\n"
)

// Security types.
const (
	securityInvalid = 0
	securityNone    = 1
)

// Client is an RFB session after the handshake (ServerInit read).
type Client struct {
	conn net.Conn
	r    *bufio.Reader

	// Version is the protocol version agreed (Version33, 37 or 38).
	Version string
	// Width and Height are the framebuffer's size (DesktopSize updates it).
	Width, Height int
	// Name is the desktop's name.
	Name string
}

// Handshake runs the RFB handshake on conn: the protocol version, security
// type None, ClientInit (shared) and ServerInit; then it sets the client's
// pixel format (32-bit true colour) and encodings (Raw, DesktopSize).
// ctx's deadline (and cancellation) bounds it. The caller keeps conn.
func Handshake(ctx context.Context, conn net.Conn) (*Client, error) {
	defer watch(ctx, conn)()
	c := &Client{conn: conn, r: bufio.NewReaderSize(conn, 64<<10)}
	if err := c.handshake(); err != nil {
		return nil, ctxErr(ctx, err)
	}
	return c, nil
}

func (c *Client) handshake() error {
	var v [12]byte
	if _, err := io.ReadFull(c.r, v[:]); err != nil {
		return fmt.Errorf("rfb: reading the server's protocol version: %w", err)
	}
	var major, minor int
	if n, err := fmt.Sscanf(string(v[:]), "RFB %03d.%03d\n", &major, &minor); err != nil || n != 2 || v[3] != ' ' || v[7] != '.' || v[11] != '\n' {
		return fmt.Errorf("rfb: not an RFB server: protocol version %q", v[:])
	}
	switch {
	case major != 3 || minor < 3:
		return fmt.Errorf("rfb: unsupported protocol version %d.%d", major, minor)
	case minor >= 8:
		c.Version = Version38
	case minor == 7:
		c.Version = Version37
	default: // 3.3, and 3.4–3.6 read as 3.3 (the specification's rule)
		c.Version = Version33
	}
	if _, err := io.WriteString(c.conn, c.Version); err != nil {
		return fmt.Errorf("rfb: sending the protocol version: %w", err)
	}
	if err := c.security(); err != nil {
		return err
	}
	if _, err := c.conn.Write([]byte{1}); err != nil { // ClientInit: shared
		return fmt.Errorf("rfb: ClientInit: %w", err)
	}
	if err := c.serverInit(); err != nil {
		return err
	}
	return c.setFormatAndEncodings()
}

// security agrees on security type None and reads its result.
func (c *Client) security() error {
	if c.Version == Version33 {
		var t uint32
		if err := binary.Read(c.r, binary.BigEndian, &t); err != nil {
			return fmt.Errorf("rfb: reading the security type: %w", err)
		}
		switch t {
		case securityNone:
			return nil // 3.3: no SecurityResult for None
		case securityInvalid:
			return c.failure("the server refused the connection")
		default:
			return fmt.Errorf("rfb: the server requires security type %d; only None (1) is supported", t)
		}
	}
	n, err := c.r.ReadByte()
	if err != nil {
		return fmt.Errorf("rfb: reading the security types: %w", err)
	}
	if n == 0 {
		return c.failure("the server refused the connection")
	}
	types := make([]byte, n)
	if _, err := io.ReadFull(c.r, types); err != nil {
		return fmt.Errorf("rfb: reading the security types: %w", err)
	}
	found := false
	for _, t := range types {
		found = found || t == securityNone
	}
	if !found {
		return fmt.Errorf("rfb: the server offers security types %v; only None (1) is supported", types)
	}
	if _, err := c.conn.Write([]byte{securityNone}); err != nil {
		return fmt.Errorf("rfb: choosing security type None: %w", err)
	}
	if c.Version == Version37 {
		return nil // 3.7: no SecurityResult for None
	}
	var res uint32
	if err := binary.Read(c.r, binary.BigEndian, &res); err != nil {
		return fmt.Errorf("rfb: reading the security result: %w", err)
	}
	if res != 0 {
		return c.failure(fmt.Sprintf("security handshake failed (result %d)", res))
	}
	return nil
}

// failure reads a reason string (u32 length, text) and returns it as the
// error.
func (c *Client) failure(what string) error {
	reason, err := c.readString(MaxReasonLength, "reason")
	if err != nil {
		return fmt.Errorf("rfb: %s; %w", what, err)
	}
	return fmt.Errorf("rfb: %s: %q", what, reason)
}

// readString reads a u32 length and that many bytes, at most limit.
func (c *Client) readString(limit uint32, what string) (string, error) {
	var n uint32
	if err := binary.Read(c.r, binary.BigEndian, &n); err != nil {
		return "", fmt.Errorf("rfb: reading the %s's length: %w", what, err)
	}
	if n > limit {
		return "", fmt.Errorf("rfb: %s of %d bytes, more than %d", what, n, limit)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(c.r, b); err != nil {
		return "", fmt.Errorf("rfb: reading the %s: %w", what, err)
	}
	return string(b), nil
}

// serverInit reads the framebuffer's size, the server's pixel format
// (replaced by ours) and the desktop name.
func (c *Client) serverInit() error {
	var hdr [20]byte
	if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
		return fmt.Errorf("rfb: reading ServerInit: %w", err)
	}
	w, h := int(binary.BigEndian.Uint16(hdr[0:])), int(binary.BigEndian.Uint16(hdr[2:]))
	if err := checkSize(w, h); err != nil {
		return err
	}
	c.Width, c.Height = w, h
	name, err := c.readString(MaxNameLength, "desktop name")
	if err != nil {
		return err
	}
	c.Name = name
	return nil
}

// checkSize bounds a framebuffer size.
func checkSize(w, h int) error {
	switch {
	case w <= 0 || h <= 0:
		return fmt.Errorf("rfb: empty framebuffer %dx%d", w, h)
	case w > MaxWidth || h > MaxHeight || w*h > MaxPixels:
		return fmt.Errorf("rfb: framebuffer %dx%d is larger than kemu accepts (%dx%d, %d pixels)", w, h, MaxWidth, MaxHeight, MaxPixels)
	}
	return nil
}

// Client-to-server message types and encodings.
const (
	msgSetPixelFormat           = 0
	msgSetEncodings             = 2
	msgFramebufferUpdateRequest = 3

	encodingRaw         int32 = 0
	encodingDesktopSize int32 = -223
)

// setFormatAndEncodings asks for 32-bit little-endian true colour
// (red << 16 | green << 8 | blue) and the Raw and DesktopSize encodings.
func (c *Client) setFormatAndEncodings() error {
	pf := []byte{msgSetPixelFormat, 0, 0, 0,
		32, 24, 0, 1, // bits per pixel, depth, big-endian, true colour
		0, 255, 0, 255, 0, 255, // red, green, blue max
		16, 8, 0, // red, green, blue shift
		0, 0, 0}
	enc := []byte{msgSetEncodings, 0, 0, 2}
	for _, e := range []int32{encodingRaw, encodingDesktopSize} {
		enc = binary.BigEndian.AppendUint32(enc, uint32(e))
	}
	if _, err := c.conn.Write(append(pf, enc...)); err != nil {
		return fmt.Errorf("rfb: SetPixelFormat, SetEncodings: %w", err)
	}
	return nil
}

// watch applies ctx's deadline to conn and interrupts its I/O when ctx
// ends; the returned function undoes both.
func watch(ctx context.Context, conn net.Conn) func() {
	if d, ok := ctx.Deadline(); ok {
		conn.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	return func() {
		if stop() {
			conn.SetDeadline(time.Time{})
		}
	}
}

// ctxErr names ctx's end as the cause when it interrupted err. The conn's
// deadline is ctx's (watch), and may fire just before ctx's own timer.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%w)", err, context.Cause(ctx))
	}
	if _, ok := ctx.Deadline(); ok && errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%w (%w)", err, context.DeadlineExceeded)
	}
	return err
}
