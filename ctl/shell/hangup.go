package shell

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"golang.org/x/term"
)

// EOFHangupFlag is kemuctl shell's hidden flag that makes the end of stdin
// a hangup (watchHangup).
const EOFHangupFlag = "eof-hangup"

// ReadsInput says whether -c commands read stdin (console forwards it to
// the guest): a remote shell running them cannot take stdin's end as its
// client going away.
func ReadsInput(commands string) bool {
	for _, c := range splitCommands(commands) {
		if f := strings.Fields(c); len(f) > 0 && f[0] == "console" {
			return true
		}
	}
	return false
}

// errHangup is the cause of a session ended because its client went away.
var errHangup = errors.New("the client went away (hangup)")

// HangupExit is the exit status of a shell whose client went away (as a
// shell killed by SIGHUP: 128+1).
const HangupExit = 129

// hangupGrace bounds how long a shell whose client went away takes to end
// its launcher streams before it exits anyway.
const hangupGrace = 2 * time.Second

// hangupPoll is how often the watcher checks whether the session ended
// normally (a hangup itself wakes it at once).
const hangupPoll = 500 * time.Millisecond

// exitOnHangup ends the process once the client went away.
var exitOnHangup = func() { os.Exit(HangupExit) }

// watchHangup ends the session when its client goes away: SIGHUP (the
// terminal closed, as when the container runtime closes an exec's
// terminal), stdout hung up or without a reader (nobody can see the
// output any more), or stdin a terminal that hung up. Under kemuctl shell
// VMI these are what the launcher Pod's exec shows of a killed client or a
// dropped connection; without the watcher an idle prompt, events or
// console would keep the shell (and its launcher streams) alive until the
// Pod dies. onHangup runs first (cancel the session's context, close its
// connection so that the launcher sees its streams end), then the process
// exits with HangupExit. stop ends the watcher.
//
// eofHangup also takes the end of a pipe's stdin (its writers gone:
// POLLHUP) as a hangup. Without a terminal, the container runtime shows
// the remote shell nothing else of a client that went away: it keeps
// draining stdout and stderr until the process ends, and closes only
// stdin. kemuctl shell VMI sets it (EOFHangupFlag) for -c commands that
// read no input, and holds the exec's stdin open until it ends itself.
func watchHangup(in, out any, eofHangup bool, onHangup func()) (stop func()) {
	var fds []unix.PollFd
	if f, ok := out.(*os.File); ok {
		fds = append(fds, unix.PollFd{Fd: int32(f.Fd())})
	}
	if f, ok := in.(*os.File); ok && (eofHangup || term.IsTerminal(int(f.Fd()))) {
		// Otherwise a pipe's stdin ends by EOF, which the prompt and
		// console read as the end of input; only a terminal's hangup is
		// a hangup.
		fds = append(fds, unix.PollFd{Fd: int32(f.Fd())})
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGHUP)
	done := make(chan struct{})
	hung := make(chan struct{}, 2)
	go func() {
		for len(fds) > 0 {
			select {
			case <-done:
				return
			default:
			}
			for i := range fds {
				fds[i].Revents = 0
			}
			// Events 0: only POLLHUP, POLLERR and POLLNVAL report.
			n, err := unix.Poll(fds, int(hangupPoll/time.Millisecond))
			if err != nil && !errors.Is(err, unix.EINTR) {
				return
			}
			if n > 0 {
				for _, fd := range fds {
					if fd.Revents&(unix.POLLHUP|unix.POLLERR) != 0 {
						hung <- struct{}{}
						return
					}
				}
			}
		}
	}()
	go func() {
		select {
		case <-done:
			return
		case <-sig:
		case <-hung:
		}
		ended := make(chan struct{})
		go func() { onHangup(); close(ended) }()
		select {
		case <-ended:
		case <-time.After(hangupGrace):
		}
		exitOnHangup()
	}()
	return func() {
		signal.Stop(sig)
		close(done)
	}
}

// hangupContext is the session's context, cancelled with errHangup by
// the hangup watcher.
func hangupContext(parent context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	return ctx, func() { cancel(errHangup) }
}
