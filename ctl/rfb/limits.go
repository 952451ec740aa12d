package rfb

// Bounds on what a server may send.
const (
	// MaxWidth and MaxHeight bound the framebuffer's size.
	MaxWidth  = 8192
	MaxHeight = 8192
	// MaxPixels bounds width × height: 64 MiB of 32-bit pixels.
	MaxPixels = (64 << 20) / bytesPerPixel
	// MaxNameLength bounds the desktop name of ServerInit.
	MaxNameLength = 4096
	// MaxReasonLength bounds a failure reason string.
	MaxReasonLength = 4096
	// MaxCutText bounds a ServerCutText message (skipped).
	MaxCutText = 1 << 20
)

// bytesPerPixel is the pixel format the client asks for: 32 bits.
const bytesPerPixel = 4
