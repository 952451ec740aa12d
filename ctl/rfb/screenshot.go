package rfb

import (
	"context"
	"fmt"
	"image"
	"image/png"
	"io"
	"net"
	"os"
)

// Screenshot takes one picture of the server's screen on conn: the
// handshake, then the whole framebuffer. ctx's deadline bounds it; the
// caller closes conn.
func Screenshot(ctx context.Context, conn net.Conn) (*image.RGBA, error) {
	c, err := Handshake(ctx, conn)
	if err != nil {
		return nil, err
	}
	return c.Framebuffer(ctx)
}

// WritePNG writes img as a PNG.
func WritePNG(w io.Writer, img image.Image) error {
	if err := png.Encode(w, img); err != nil {
		return fmt.Errorf("rfb: writing PNG: %w", err)
	}
	return nil
}

// SavePNG writes img as a PNG file at path.
func SavePNG(path string, img image.Image) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := WritePNG(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
