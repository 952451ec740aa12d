package qmp

import (
	"context"
	"encoding/base64"
	"fmt"
)

// MaxFileChunk is the most guest-file-read asks for and guest-file-write
// sends at once: a read's reply is base64 (4/3 of the bytes) on one line,
// which must fit MaxAgentLineSize (512 KiB → 683 KiB). qemu-ga itself
// allows reads of 48 MiB.
const MaxFileChunk = 512 << 10

// FileMode is guest-file-open's mode (fopen's).
type FileMode string

// guest-file-open modes kemu uses.
const (
	FileRead      FileMode = "r"
	FileWrite     FileMode = "w"
	FileAppend    FileMode = "a"
	FileReadWrite FileMode = "w+" // created or truncated, read and written
)

// FileOpen opens path in the guest and returns qemu-ga's handle.
func (a *Agent) FileOpen(ctx context.Context, path string, mode FileMode) (int64, error) {
	var h int64
	if err := a.Execute(ctx, "guest-file-open", map[string]any{"path": path, "mode": string(mode)}, &h); err != nil {
		return 0, err
	}
	return h, nil
}

// FileClose closes a handle of FileOpen.
func (a *Agent) FileClose(ctx context.Context, handle int64) error {
	return a.Execute(ctx, "guest-file-close", map[string]any{"handle": handle}, nil)
}

// FileRead reads at most count bytes (1 ≤ count ≤ MaxFileChunk) from a
// handle; eof says the guest's stream reached its end. A reply with more
// bytes than asked, or whose count disagrees with its data, is refused.
func (a *Agent) FileRead(ctx context.Context, handle int64, count int) (data []byte, eof bool, err error) {
	if count < 1 || count > MaxFileChunk {
		return nil, false, fmt.Errorf("qmp: guest-file-read of %d bytes: want 1 to %d", count, MaxFileChunk)
	}
	var r struct {
		Count  int    `json:"count"`
		BufB64 string `json:"buf-b64"`
		EOF    bool   `json:"eof"`
	}
	if err := a.Execute(ctx, "guest-file-read", map[string]any{"handle": handle, "count": count}, &r); err != nil {
		return nil, false, err
	}
	if base64.StdEncoding.DecodedLen(len(r.BufB64)) > count+2 {
		return nil, false, fmt.Errorf("qmp: guest-file-read: %d base64 bytes for a read of %d", len(r.BufB64), count)
	}
	data, err = base64.StdEncoding.DecodeString(r.BufB64)
	if err != nil {
		return nil, false, fmt.Errorf("qmp: guest-file-read: buf-b64: %w", err)
	}
	if len(data) != r.Count || len(data) > count {
		return nil, false, fmt.Errorf("qmp: guest-file-read: count %d, %d bytes of data, %d asked", r.Count, len(data), count)
	}
	return data, r.EOF, nil
}

// FileWrite writes data (at most MaxFileChunk bytes) to a handle; a short
// write is an error.
func (a *Agent) FileWrite(ctx context.Context, handle int64, data []byte) error {
	if len(data) > MaxFileChunk {
		return fmt.Errorf("qmp: guest-file-write of %d bytes: at most %d at once", len(data), MaxFileChunk)
	}
	var r struct {
		Count int  `json:"count"`
		EOF   bool `json:"eof"`
	}
	args := map[string]any{"handle": handle, "buf-b64": base64.StdEncoding.EncodeToString(data)}
	if err := a.Execute(ctx, "guest-file-write", args, &r); err != nil {
		return err
	}
	if r.Count != len(data) {
		return fmt.Errorf("qmp: guest-file-write: %d of %d bytes written", r.Count, len(data))
	}
	return nil
}

// FileSeek moves a handle's position (whence "set", "cur", "end") and
// returns the new one; it also clears the stream's end-of-file flag, so a
// file another process appends to can be read on after an eof.
func (a *Agent) FileSeek(ctx context.Context, handle, offset int64, whence string) (int64, error) {
	var r struct {
		Position int64 `json:"position"`
		EOF      bool  `json:"eof"`
	}
	args := map[string]any{"handle": handle, "offset": offset, "whence": whence}
	if err := a.Execute(ctx, "guest-file-seek", args, &r); err != nil {
		return 0, err
	}
	return r.Position, nil
}
