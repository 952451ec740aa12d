package rfb

import (
	"context"
	"encoding/binary"
	"fmt"
	"image"
	"io"
)

// Server-to-client message types.
const (
	msgFramebufferUpdate   = 0
	msgSetColourMapEntries = 1
	msgBell                = 2
	msgServerCutText       = 3
)

// Framebuffer asks for the whole framebuffer (a non-incremental
// FramebufferUpdateRequest) and reads updates until every pixel of it
// arrived; a DesktopSize update starts over at the new size. ctx's
// deadline bounds it.
func (c *Client) Framebuffer(ctx context.Context) (*image.RGBA, error) {
	defer watch(ctx, c.conn)()
	img, err := c.framebuffer()
	if err != nil {
		return nil, ctxErr(ctx, err)
	}
	return img, nil
}

func (c *Client) framebuffer() (*image.RGBA, error) {
	img := image.NewRGBA(image.Rect(0, 0, c.Width, c.Height))
	if err := c.requestUpdate(); err != nil {
		return nil, err
	}
	covered := newCoverage(c.Width, c.Height)
	for {
		t, err := c.r.ReadByte()
		if err != nil {
			return nil, fmt.Errorf("rfb: reading a server message: %w", err)
		}
		switch t {
		case msgFramebufferUpdate:
			resized, err := c.update(img, covered)
			if err != nil {
				return nil, err
			}
			if resized {
				img = image.NewRGBA(image.Rect(0, 0, c.Width, c.Height))
				covered = newCoverage(c.Width, c.Height)
				if err := c.requestUpdate(); err != nil {
					return nil, err
				}
				continue
			}
			if covered.full() {
				return img, nil
			}
		case msgSetColourMapEntries: // not used in true colour; skipped
			var hdr [5]byte
			if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
				return nil, fmt.Errorf("rfb: reading SetColourMapEntries: %w", err)
			}
			if _, err := c.r.Discard(6 * int(binary.BigEndian.Uint16(hdr[3:]))); err != nil {
				return nil, fmt.Errorf("rfb: reading SetColourMapEntries: %w", err)
			}
		case msgBell:
		case msgServerCutText:
			if _, err := c.r.Discard(3); err != nil {
				return nil, fmt.Errorf("rfb: reading ServerCutText: %w", err)
			}
			if _, err := c.readString(MaxCutText, "cut text"); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("rfb: unknown server message type %d", t)
		}
	}
}

// requestUpdate asks for the whole framebuffer, non-incrementally.
func (c *Client) requestUpdate() error {
	b := []byte{msgFramebufferUpdateRequest, 0}
	for _, v := range []int{0, 0, c.Width, c.Height} {
		b = binary.BigEndian.AppendUint16(b, uint16(v))
	}
	if _, err := c.conn.Write(b); err != nil {
		return fmt.Errorf("rfb: FramebufferUpdateRequest: %w", err)
	}
	return nil
}

// update reads one FramebufferUpdate's rectangles into img. A DesktopSize
// rectangle sets the new size and says so (the rest of the update is read
// and dropped: it was for the old size).
func (c *Client) update(img *image.RGBA, covered *coverage) (resized bool, err error) {
	var hdr [3]byte
	if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
		return false, fmt.Errorf("rfb: reading FramebufferUpdate: %w", err)
	}
	n := int(binary.BigEndian.Uint16(hdr[1:]))
	for i := range n {
		var rh [12]byte
		if _, err := io.ReadFull(c.r, rh[:]); err != nil {
			return false, fmt.Errorf("rfb: reading rectangle %d of %d: %w", i, n, err)
		}
		r := image.Rect(0, 0, int(binary.BigEndian.Uint16(rh[4:])), int(binary.BigEndian.Uint16(rh[6:]))).
			Add(image.Pt(int(binary.BigEndian.Uint16(rh[0:])), int(binary.BigEndian.Uint16(rh[2:]))))
		switch enc := int32(binary.BigEndian.Uint32(rh[8:])); enc {
		case encodingDesktopSize:
			if err := checkSize(r.Dx(), r.Dy()); err != nil {
				return false, err
			}
			c.Width, c.Height, resized = r.Dx(), r.Dy(), true
		case encodingRaw:
			bounds := img.Bounds()
			if resized {
				bounds = image.Rect(0, 0, c.Width, c.Height)
			}
			if !r.In(bounds) {
				return false, fmt.Errorf("rfb: rectangle %v outside the %dx%d framebuffer", r, bounds.Dx(), bounds.Dy())
			}
			if resized { // for the old size: drop it
				if _, err := c.r.Discard(r.Dx() * r.Dy() * bytesPerPixel); err != nil {
					return false, fmt.Errorf("rfb: reading rectangle %v: %w", r, err)
				}
				continue
			}
			if err := c.readRaw(img, r); err != nil {
				return false, err
			}
			covered.add(r)
		default:
			return false, fmt.Errorf("rfb: rectangle %v in encoding %d, which the client did not ask for", r, enc)
		}
	}
	return resized, nil
}

// readRaw reads a Raw rectangle (rows of 32-bit little-endian pixels,
// red << 16 | green << 8 | blue) into img, one row at a time.
func (c *Client) readRaw(img *image.RGBA, r image.Rectangle) error {
	row := make([]byte, r.Dx()*bytesPerPixel)
	for y := r.Min.Y; y < r.Max.Y; y++ {
		if _, err := io.ReadFull(c.r, row); err != nil {
			return fmt.Errorf("rfb: reading rectangle %v: %w", r, err)
		}
		dst := img.Pix[img.PixOffset(r.Min.X, y):]
		for x := 0; x < r.Dx(); x++ {
			p := row[x*bytesPerPixel:]
			dst[4*x], dst[4*x+1], dst[4*x+2], dst[4*x+3] = p[2], p[1], p[0], 0xff
		}
	}
	return nil
}

// coverage records which pixels the updates have set: one bit per pixel
// (MaxPixels bits, 2 MiB, at most), so overlapping rectangles count once.
type coverage struct {
	w, h int
	bits []uint64
	n    int
}

func newCoverage(w, h int) *coverage {
	return &coverage{w: w, h: h, bits: make([]uint64, (w*h+63)/64)}
}

func (c *coverage) add(r image.Rectangle) {
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			i := y*c.w + x
			if c.bits[i/64]&(1<<(i%64)) == 0 {
				c.bits[i/64] |= 1 << (i % 64)
				c.n++
			}
		}
	}
}

func (c *coverage) full() bool { return c.n == c.w*c.h }
