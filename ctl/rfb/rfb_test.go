package rfb

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"image"
	"image/color"
	"image/png"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// server is the scripted end of a net.Pipe: it sends bytes and checks
// what the client wrote.
type server struct {
	t    *testing.T
	conn net.Conn
}

func (s *server) send(parts ...any) {
	var b []byte
	for _, p := range parts {
		switch v := p.(type) {
		case string:
			b = append(b, v...)
		case []byte:
			b = append(b, v...)
		case byte:
			b = append(b, v)
		case uint16:
			b = binary.BigEndian.AppendUint16(b, v)
		case uint32:
			b = binary.BigEndian.AppendUint32(b, v)
		case int32:
			b = binary.BigEndian.AppendUint32(b, uint32(v))
		default:
			s.t.Errorf("send: %T", p)
		}
	}
	if _, err := s.conn.Write(b); err != nil {
		s.t.Errorf("server send: %v", err)
	}
}

// expect reads len(want) bytes and compares them (nil bytes in want: any).
func (s *server) expect(what string, want []byte) []byte {
	got := make([]byte, len(want))
	if _, err := io.ReadFull(s.conn, got); err != nil {
		s.t.Errorf("server: reading %s: %v", what, err)
		return got
	}
	if !bytes.Equal(got, want) {
		s.t.Errorf("server: %s = %v, want %v", what, got, want)
	}
	return got
}

// The client's messages after ServerInit, as the client must send them.
var (
	wantFormatAndEncodings = []byte{
		0, 0, 0, 0, 32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 16, 8, 0, 0, 0, 0, // SetPixelFormat
		2, 0, 0, 2, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0x21, // SetEncodings Raw, DesktopSize
	}
)

func updateRequest(w, h uint16) []byte {
	return []byte{3, 0, 0, 0, 0, 0, byte(w >> 8), byte(w), byte(h >> 8), byte(h)}
}

// init38 is a 3.8 handshake up to (and with) the client's ServerInit
// answer for a w×h framebuffer.
func (s *server) init38(w, h uint16) {
	s.send(Version38)
	s.expect("version", []byte(Version38))
	s.send(byte(2), byte(2), byte(1)) // VNC auth, None
	s.expect("security type", []byte{1})
	s.send(uint32(0))
	s.expect("ClientInit", []byte{1})
	s.serverInit(w, h, "vm")
}

func (s *server) serverInit(w, h uint16, name string) {
	pf := make([]byte, 16)
	s.send(w, h, pf, uint32(len(name)), name)
	s.expect("SetPixelFormat, SetEncodings", wantFormatAndEncodings)
	s.expect("FramebufferUpdateRequest", updateRequest(w, h))
}

// pixel is one 32-bit little-endian pixel, red << 16 | green << 8 | blue.
func pixel(r, g, b byte) []byte { return []byte{b, g, r, 0} }

func raw(x, y, w, h uint16, px ...[]byte) []any {
	out := []any{x, y, w, h, int32(0)}
	for _, p := range px {
		out = append(out, p)
	}
	return out
}

func msg(parts ...[]any) []any {
	var out []any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

var (
	red, green, blue, white = pixel(255, 0, 0), pixel(0, 255, 0), pixel(0, 0, 255), pixel(255, 255, 255)
)

func TestScreenshot(t *testing.T) {
	for _, tc := range []struct {
		name    string
		script  func(s *server)
		timeout time.Duration
		want    []color.RGBA // row by row; nil with wantErr
		w, h    int
		wantErr string
	}{
		{
			name: "3.8, one rectangle",
			script: func(s *server) {
				s.init38(2, 2)
				s.send(msg([]any{byte(0), byte(0), uint16(1)}, raw(0, 0, 2, 2, red, green, blue, white))...)
			},
			w: 2, h: 2, want: []color.RGBA{{255, 0, 0, 255}, {0, 255, 0, 255}, {0, 0, 255, 255}, {255, 255, 255, 255}},
		},
		{
			name: "3.7: no SecurityResult for None",
			script: func(s *server) {
				s.send(Version37)
				s.expect("version", []byte(Version37))
				s.send(byte(1), byte(1))
				s.expect("security type", []byte{1})
				s.expect("ClientInit", []byte{1})
				s.serverInit(1, 1, "")
				s.send(msg([]any{byte(0), byte(0), uint16(1)}, raw(0, 0, 1, 1, blue))...)
			},
			w: 1, h: 1, want: []color.RGBA{{0, 0, 255, 255}},
		},
		{
			name: "3.3: the server picks None",
			script: func(s *server) {
				s.send(Version33)
				s.expect("version", []byte(Version33))
				s.send(uint32(1))
				s.expect("ClientInit", []byte{1})
				s.serverInit(1, 1, "x")
				s.send(msg([]any{byte(0), byte(0), uint16(1)}, raw(0, 0, 1, 1, green))...)
			},
			w: 1, h: 1, want: []color.RGBA{{0, 255, 0, 255}},
		},
		{
			name: "3.5 is answered as 3.3",
			script: func(s *server) {
				s.send("RFB 003.005\n")
				s.expect("version", []byte(Version33))
				s.send(uint32(1))
				s.expect("ClientInit", []byte{1})
				s.serverInit(1, 1, "")
				s.send(msg([]any{byte(0), byte(0), uint16(1)}, raw(0, 0, 1, 1, red))...)
			},
			w: 1, h: 1, want: []color.RGBA{{255, 0, 0, 255}},
		},
		{
			name: "3.889 is answered as 3.8",
			script: func(s *server) {
				s.send("RFB 003.889\n")
				s.expect("version", []byte(Version38))
				s.send(byte(1), byte(1))
				s.expect("security type", []byte{1})
				s.send(uint32(0))
				s.expect("ClientInit", []byte{1})
				s.serverInit(1, 1, "")
				s.send(msg([]any{byte(0), byte(0), uint16(1)}, raw(0, 0, 1, 1, red))...)
			},
			w: 1, h: 1, want: []color.RGBA{{255, 0, 0, 255}},
		},
		{
			name: "updates in pieces, overlapping, between other messages",
			script: func(s *server) {
				s.init38(2, 2)
				s.send(byte(2))                                                                 // Bell
				s.send(byte(3), []byte{0, 0, 0}, uint32(5), "hello")                            // ServerCutText
				s.send(byte(1), byte(0), uint16(0), uint16(2), make([]byte, 12))                // SetColourMapEntries
				s.send(msg([]any{byte(0), byte(0), uint16(1)}, raw(0, 0, 2, 1, red, red))...)   // top row
				s.send(msg([]any{byte(0), byte(0), uint16(1)}, raw(0, 0, 1, 2, blue, blue))...) // left column again
				s.send(msg([]any{byte(0), byte(0), uint16(1)}, raw(1, 1, 1, 1, white))...)      // the last pixel
			},
			w: 2, h: 2, want: []color.RGBA{{0, 0, 255, 255}, {255, 0, 0, 255}, {0, 0, 255, 255}, {255, 255, 255, 255}},
		},
		{
			name: "DesktopSize: the client asks again at the new size",
			script: func(s *server) {
				s.init38(4, 4)
				s.send(msg([]any{byte(0), byte(0), uint16(1)}, []any{uint16(0), uint16(0), uint16(1), uint16(2), int32(-223)})...)
				s.expect("FramebufferUpdateRequest at the new size", updateRequest(1, 2))
				s.send(msg([]any{byte(0), byte(0), uint16(1)}, raw(0, 0, 1, 2, green, red))...)
			},
			w: 1, h: 2, want: []color.RGBA{{0, 255, 0, 255}, {255, 0, 0, 255}},
		},
		{
			name:    "not an RFB server",
			script:  func(s *server) { s.send("HTTP/1.1 200") },
			wantErr: "not an RFB server",
		},
		{
			name:    "RFB 4",
			script:  func(s *server) { s.send("RFB 004.000\n") },
			wantErr: "unsupported protocol version 4.0",
		},
		{
			name: "only VNC authentication",
			script: func(s *server) {
				s.send(Version38)
				s.expect("version", []byte(Version38))
				s.send(byte(1), byte(2))
			},
			wantErr: "only None (1) is supported",
		},
		{
			name: "3.3: VNC authentication",
			script: func(s *server) {
				s.send(Version33)
				s.expect("version", []byte(Version33))
				s.send(uint32(2))
			},
			wantErr: "requires security type 2",
		},
		{
			name: "refused with a reason",
			script: func(s *server) {
				s.send(Version38)
				s.expect("version", []byte(Version38))
				s.send(byte(0), uint32(9), "too many!")
			},
			wantErr: `refused the connection: "too many!"`,
		},
		{
			name: "a reason too long",
			script: func(s *server) {
				s.send(Version38)
				s.expect("version", []byte(Version38))
				s.send(byte(0), uint32(MaxReasonLength+1))
			},
			wantErr: "reason of 4097 bytes",
		},
		{
			name: "security result failed",
			script: func(s *server) {
				s.send(Version38)
				s.expect("version", []byte(Version38))
				s.send(byte(1), byte(1))
				s.expect("security type", []byte{1})
				s.send(uint32(1), uint32(4), "nope")
			},
			wantErr: `security handshake failed (result 1): "nope"`,
		},
		{
			name:    "framebuffer wider than MaxWidth",
			script:  func(s *server) { s.initRaw(MaxWidth+1, 1, 0) },
			wantErr: "framebuffer 8193x1 is larger",
		},
		{
			name:    "framebuffer of more than MaxPixels",
			script:  func(s *server) { s.initRaw(8192, 8192, 0) },
			wantErr: "framebuffer 8192x8192 is larger",
		},
		{
			name:    "empty framebuffer",
			script:  func(s *server) { s.initRaw(0, 10, 0) },
			wantErr: "empty framebuffer 0x10",
		},
		{
			name:    "desktop name too long",
			script:  func(s *server) { s.initRaw(1, 1, MaxNameLength+1) },
			wantErr: "desktop name of 4097 bytes",
		},
		{
			name: "rectangle outside the framebuffer",
			script: func(s *server) {
				s.init38(2, 2)
				s.send(msg([]any{byte(0), byte(0), uint16(1)}, raw(1, 0, 2, 1))...)
			},
			wantErr: "outside the 2x2 framebuffer",
		},
		{
			name: "rectangle at the far end of the coordinates",
			script: func(s *server) {
				s.init38(2, 2)
				s.send(msg([]any{byte(0), byte(0), uint16(1)}, raw(65535, 65535, 65535, 65535))...)
			},
			wantErr: "outside the 2x2 framebuffer",
		},
		{
			name: "DesktopSize too large",
			script: func(s *server) {
				s.init38(2, 2)
				s.send(msg([]any{byte(0), byte(0), uint16(1)}, []any{uint16(0), uint16(0), uint16(65535), uint16(65535), int32(-223)})...)
			},
			wantErr: "framebuffer 65535x65535 is larger",
		},
		{
			name: "an encoding not asked for",
			script: func(s *server) {
				s.init38(2, 2)
				s.send(msg([]any{byte(0), byte(0), uint16(1)}, []any{uint16(0), uint16(0), uint16(2), uint16(2), int32(16)})...)
			},
			wantErr: "encoding 16, which the client did not ask for",
		},
		{
			name: "an unknown message",
			script: func(s *server) {
				s.init38(2, 2)
				s.send(byte(150))
			},
			wantErr: "unknown server message type 150",
		},
		{
			name: "cut text too long",
			script: func(s *server) {
				s.init38(2, 2)
				s.send(byte(3), []byte{0, 0, 0}, uint32(MaxCutText+1))
			},
			wantErr: "cut text of 1048577 bytes",
		},
		{
			name: "the server ends mid-rectangle",
			script: func(s *server) {
				s.init38(2, 2)
				s.send(msg([]any{byte(0), byte(0), uint16(1)}, raw(0, 0, 2, 2, red))...)
				s.conn.Close()
			},
			wantErr: "reading rectangle (0,0)-(2,2)",
		},
		{
			name:    "a server that says nothing: the deadline",
			script:  func(s *server) {},
			timeout: 200 * time.Millisecond,
			wantErr: "deadline exceeded",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli, srv := net.Pipe()
			defer cli.Close()
			done := make(chan struct{})
			go func() {
				defer close(done)
				tc.script(&server{t: t, conn: srv})
				io.Copy(io.Discard, srv) // whatever else the client writes
				srv.Close()
			}()
			timeout := tc.timeout
			if timeout == 0 {
				timeout = 10 * time.Second
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			img, err := Screenshot(ctx, cli)
			cli.Close()
			<-done
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one with %q", err, tc.wantErr)
				}
				if tc.timeout != 0 && !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("error %v does not wrap context.DeadlineExceeded", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b := img.Bounds(); b.Dx() != tc.w || b.Dy() != tc.h {
				t.Fatalf("image %v, want %dx%d", b, tc.w, tc.h)
			}
			for i, want := range tc.want {
				if got := img.RGBAAt(i%tc.w, i/tc.w); got != want {
					t.Errorf("pixel (%d,%d) = %v, want %v", i%tc.w, i/tc.w, got, want)
				}
			}
		})
	}
}

// initRaw is a 3.8 handshake whose ServerInit has the given size and a
// name of nameLen bytes (not sent: the client must refuse first).
func (s *server) initRaw(w, h int, nameLen int) {
	s.send(Version38)
	s.expect("version", []byte(Version38))
	s.send(byte(1), byte(1))
	s.expect("security type", []byte{1})
	s.send(uint32(0))
	s.expect("ClientInit", []byte{1})
	s.send(uint16(w), uint16(h), make([]byte, 16), uint32(nameLen))
}

func TestWritePNG(t *testing.T) {
	img := image.NewRGBA(image.Rect(0, 0, 3, 2))
	img.SetRGBA(2, 1, color.RGBA{1, 2, 3, 255})
	var buf bytes.Buffer
	if err := WritePNG(&buf, img); err != nil {
		t.Fatal(err)
	}
	back, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if b := back.Bounds(); b.Dx() != 3 || b.Dy() != 2 {
		t.Fatalf("decoded %v", b)
	}
	if r, g, b, _ := back.At(2, 1).RGBA(); r>>8 != 1 || g>>8 != 2 || b>>8 != 3 {
		t.Errorf("pixel %v", back.At(2, 1))
	}
}
