package launcher

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/kemu-dev/kemu/qmp"
)

// MaxCopySize bounds one CopyIn or CopyOut.
const MaxCopySize = 256 << 20

// ErrCopyTooLarge: a copy would pass MaxCopySize.
var ErrCopyTooLarge = fmt.Errorf("over the copy limit of %d MiB", MaxCopySize>>20)

// CopyIn copies the host's regular file src to dst in the guest through
// the guest agent (created or truncated), in qmp.MaxFileChunk chunks, and
// returns the bytes copied. A file over MaxCopySize is refused before
// anything is sent (one that grows past it meanwhile, midway).
func (l *Launcher) CopyIn(ctx context.Context, src, dst string) (int64, error) {
	f, err := os.Open(src)
	if err != nil {
		return 0, fmt.Errorf("launcher: copy-in: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("launcher: copy-in: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return 0, fmt.Errorf("launcher: copy-in: %s is not a regular file", src)
	}
	if fi.Size() > MaxCopySize {
		return 0, fmt.Errorf("launcher: copy-in: %s is %d bytes: %w", src, fi.Size(), ErrCopyTooLarge)
	}
	a, err := l.Agent(ctx)
	if err != nil {
		return 0, err
	}
	h, err := a.FileOpen(ctx, dst, qmp.FileWrite)
	if err != nil {
		return 0, fmt.Errorf("launcher: copy-in: opening %s in the guest: %w", dst, err)
	}
	n, err := copyIn(ctx, a, h, io.LimitReader(f, MaxCopySize+1))
	if cerr := a.FileClose(ctx, h); err == nil && cerr != nil {
		err = fmt.Errorf("closing %s in the guest: %w", dst, cerr)
	}
	if err != nil {
		return n, fmt.Errorf("launcher: copy-in %s to %s: %w", src, dst, err)
	}
	return n, nil
}

func copyIn(ctx context.Context, a *qmp.Agent, h int64, r io.Reader) (int64, error) {
	buf := make([]byte, qmp.MaxFileChunk)
	var total int64
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			if total+int64(n) > MaxCopySize {
				return total, ErrCopyTooLarge
			}
			if werr := a.FileWrite(ctx, h, buf[:n]); werr != nil {
				return total, werr
			}
			total += int64(n)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// CopyOut copies the guest's file src to dst on the host through the
// guest agent, in qmp.MaxFileChunk chunks, and returns the bytes copied.
// dst appears only once the copy is complete (a file beside it, renamed);
// a guest file over MaxCopySize fails the copy once the limit is passed.
func (l *Launcher) CopyOut(ctx context.Context, src, dst string) (int64, error) {
	a, err := l.Agent(ctx)
	if err != nil {
		return 0, err
	}
	var tok [6]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return 0, err
	}
	tmp := filepath.Join(filepath.Dir(dst), "."+filepath.Base(dst)+".kemu-"+hex.EncodeToString(tok[:]))
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
	if err != nil {
		return 0, fmt.Errorf("launcher: copy-out: %w", err)
	}
	done := false
	defer func() {
		if !done {
			f.Close()
			os.Remove(tmp)
		}
	}()
	h, err := a.FileOpen(ctx, src, qmp.FileRead)
	if err != nil {
		return 0, fmt.Errorf("launcher: copy-out: opening %s in the guest: %w", src, err)
	}
	n, err := copyOut(ctx, a, h, f, MaxCopySize)
	_ = a.FileClose(ctx, h)
	if err == nil {
		err = f.Close()
		done = err == nil
	}
	if err == nil {
		if err = os.Rename(tmp, dst); err != nil {
			os.Remove(tmp)
		}
	}
	if err != nil {
		return n, fmt.Errorf("launcher: copy-out %s to %s: %w", src, dst, err)
	}
	return n, nil
}

// copyOut reads the guest's handle h to w, failing with ErrCopyTooLarge
// once more than limit bytes came.
func copyOut(ctx context.Context, a *qmp.Agent, h int64, w io.Writer, limit int64) (int64, error) {
	var total int64
	for {
		// One byte over the limit tells a file of limit bytes from a
		// larger one.
		data, eof, err := a.FileRead(ctx, h, int(min(qmp.MaxFileChunk, limit-total+1)))
		if err != nil {
			return total, err
		}
		if total+int64(len(data)) > limit {
			return total, ErrCopyTooLarge
		}
		if _, err := w.Write(data); err != nil {
			return total, err
		}
		total += int64(len(data))
		if eof || len(data) == 0 {
			return total, nil
		}
	}
}
