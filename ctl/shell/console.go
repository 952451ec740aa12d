package shell

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/kemu-dev/kemu/launcher/rpc"
)

// ConsoleEscape (Ctrl-]) leaves the console, as in telnet and virsh.
const ConsoleEscape = 0x1d

// ConsoleDrain is how long the console keeps printing, once its input
// ended, after the last output.
const ConsoleDrain = 500 * time.Millisecond

// console attaches the serial console: stdin to the guest (the terminal in
// raw mode), the guest's output to stdout, until Ctrl-], the end of stdin
// (then until the output is quiet) or the launcher ends the stream.
func (s *shell) console(parent context.Context, rest string) error {
	if err := noArgs("console", rest); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	stream, err := s.client.Console(ctx)
	if err != nil {
		return err
	}

	file, isFile := s.in.(*os.File)
	if isFile && term.IsTerminal(int(file.Fd())) {
		fd := int(file.Fd())
		if old, err := term.MakeRaw(fd); err == nil {
			defer func() { _ = term.Restore(fd, old) }()
		}
		fmt.Fprint(s.errOut, "connected to the serial console; Ctrl-] leaves\r\n")
		defer fmt.Fprint(s.errOut, "\r\nleft the serial console\r\n")
	}

	var lastOutput atomic.Int64
	lastOutput.Store(time.Now().UnixNano())
	outDone := make(chan error, 1)
	go func() {
		for {
			msg, err := stream.Recv()
			if err != nil {
				outDone <- err
				return
			}
			lastOutput.Store(time.Now().UnixNano())
			if _, err := s.out.Write(msg.GetData()); err != nil {
				outDone <- err
				return
			}
		}
	}()

	inDone := make(chan inputEnd, 1)
	go func() {
		send := func(b []byte) error { return stream.Send(&rpc.ConsoleInput{Data: bytes.Clone(b)}) }
		var end inputEnd
		if isFile {
			end = pollInput(ctx, file, send)
		} else {
			end = copyInput(s.in, send)
		}
		if end.err == nil {
			_ = stream.CloseSend()
		}
		inDone <- end
	}()

	outputEnded := func(err error) error {
		switch {
		case errors.Is(err, io.EOF):
			fmt.Fprint(s.errOut, "\r\nthe launcher closed the console\r\n")
			return nil
		case interrupted(parent) && isCanceled(err):
			return nil
		}
		return err
	}
	select {
	case err := <-outDone:
		return outputEnded(err)
	case end := <-inDone:
		if end.err != nil {
			if interrupted(parent) {
				return nil
			}
			return end.err
		}
		if end.escaped {
			return nil
		}
	}
	// The input ended: print what the guest still says until it is quiet.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-outDone:
			return outputEnded(err)
		case <-tick.C:
			if time.Since(time.Unix(0, lastOutput.Load())) > ConsoleDrain {
				return nil
			}
		}
	}
}

// inputEnd says how the console's input ended: escaped (Ctrl-]), at the end
// of the input (neither), or with an error.
type inputEnd struct {
	escaped bool
	err     error
}

// sendUntilEscape sends b up to the escape key; true if it was there.
func sendUntilEscape(b []byte, send func([]byte) error) (bool, error) {
	if i := bytes.IndexByte(b, ConsoleEscape); i >= 0 {
		if i > 0 {
			if err := send(b[:i]); err != nil {
				return true, err
			}
		}
		return true, nil
	}
	return false, send(b)
}

// pollInput reads f without blocking past ctx (so that no read is left
// pending to steal the shell's next line once the console is left).
func pollInput(ctx context.Context, f *os.File, send func([]byte) error) inputEnd {
	fd := int(f.Fd())
	buf := make([]byte, 4096)
	for ctx.Err() == nil {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 100)
		if errors.Is(err, unix.EINTR) || n == 0 {
			continue
		}
		if err != nil {
			return inputEnd{err: err}
		}
		m, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if m > 0 {
			escaped, serr := sendUntilEscape(buf[:m], send)
			if serr != nil {
				return inputEnd{err: serr}
			}
			if escaped {
				return inputEnd{escaped: true}
			}
		}
		if err != nil || m == 0 {
			return inputEnd{}
		}
	}
	return inputEnd{err: ctx.Err()}
}

// copyInput sends what r yields (not a file: a test's or a pipe's reader).
func copyInput(r io.Reader, send func([]byte) error) inputEnd {
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			escaped, serr := sendUntilEscape(buf[:n], send)
			if serr != nil {
				return inputEnd{err: serr}
			}
			if escaped {
				return inputEnd{escaped: true}
			}
		}
		if err != nil {
			return inputEnd{}
		}
	}
}
