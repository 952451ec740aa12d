package signals

import (
	"context"
	"os"
	"time"

	"github.com/kemu-dev/kemu/api/launcherpod"
	"github.com/kemu-dev/kemu/launcher"
)

// Exit statuses of a process that ran one VM in the foreground.
const (
	// ExitPoweredOff: the guest powered off (by itself, or asked to).
	ExitPoweredOff = 0
	// ExitFailed: the VM failed to start, or QEMU crashed.
	ExitFailed = 1
	// ExitStopped: the host stopped it (grace period over, killed; in
	// kemu-launcher also a signal alone: api/launcherpod.ExitStopped).
	ExitStopped = launcherpod.ExitStopped
)

// VM is what the loop drives; *launcher.Launcher is one.
type VM interface {
	// Shutdown presses the power button and stops QEMU once grace is over.
	Shutdown(ctx context.Context, grace time.Duration) (launcher.Domain, error)
	// Stop quits QEMU at once.
	Stop(ctx context.Context) (launcher.Domain, error)
	// Kill ends QEMU with SIGKILL.
	Kill(ctx context.Context) (launcher.Domain, error)
	// Wait returns the final domain once the VM has ended.
	Wait(ctx context.Context) (launcher.Domain, error)
}

// Options are a caller's signals, other stop requests and reports.
type Options struct {
	// Signals delivers SIGTERM/SIGINT (signal.Notify).
	Signals <-chan os.Signal
	// Grace is the graceful shutdown's grace period, read when a shutdown
	// begins (the VMI's terminationGracePeriodSeconds may change meanwhile).
	Grace func() time.Duration
	// Shutdowns asks for a graceful shutdown as a first signal does; the
	// value says why (kemuctl run's --timeout).
	Shutdowns <-chan string
	// Stops asks to quit QEMU at once; the value says why (kemuctl run's
	// failed --then action).
	Stops <-chan error
	// KillEachSignal makes every signal after the first kill QEMU (again)
	// and report it (kemuctl run). Without it only the second signal does
	// and the loop reads no more signals (kemu-launcher).
	KillEachSignal bool
	// StopIsHost makes a VM that was asked to stop (a signal, Shutdowns or
	// Stops) end with ExitStopped unless the guest powered off, whatever
	// the domain's reason (kemuctl run). Without it the reason alone
	// decides (kemu-launcher).
	StopIsHost bool

	// ShuttingDown reports a graceful shutdown begun because of sig, or
	// (sig nil) of a Shutdowns request saying why.
	ShuttingDown func(sig os.Signal, why string, grace time.Duration)
	// ShutdownFailed reports the graceful shutdown's error.
	ShutdownFailed func(err error)
	// Stopping reports a Stops request.
	Stopping func(why error)
	// Killing reports a signal that kills QEMU.
	Killing func(sig os.Signal)
}

// Result is how the VM ended.
type Result struct {
	Domain launcher.Domain
	// Stopped says that a stop was asked (a signal or a request).
	Stopped bool
	// Exit is the process's exit status.
	Exit int
}

// Run waits for vm to end, shutting it down on the first signal (or a
// Shutdowns request) and killing it on the next signal.
func Run(ctx context.Context, vm VM, o Options) Result {
	final := make(chan launcher.Domain, 1)
	go func() {
		d, _ := vm.Wait(ctx)
		final <- d
	}()
	sigs := o.Signals
	stopped := false
	shutdown := func(sig os.Signal, why string) {
		stopped = true
		grace := time.Duration(0)
		if o.Grace != nil {
			grace = o.Grace()
		}
		if o.ShuttingDown != nil {
			o.ShuttingDown(sig, why, grace)
		}
		go func() {
			if _, err := vm.Shutdown(ctx, grace); err != nil && o.ShutdownFailed != nil {
				o.ShutdownFailed(err)
			}
		}()
	}
	for {
		select {
		case d := <-final:
			return Result{Domain: d, Stopped: stopped, Exit: exitStatus(d, stopped && o.StopIsHost)}
		case why := <-o.Shutdowns:
			shutdown(nil, why)
		case why := <-o.Stops:
			stopped = true
			if o.Stopping != nil {
				o.Stopping(why)
			}
			go func() { _, _ = vm.Stop(ctx) }()
		case sig := <-sigs:
			if !stopped {
				shutdown(sig, "")
				continue
			}
			if o.Killing != nil {
				o.Killing(sig)
			}
			go func() { _, _ = vm.Kill(ctx) }()
			if !o.KillEachSignal {
				sigs = nil // the kill is under way: no more signals
			}
		}
	}
}

// exitStatus maps how the VM ended to the exit status; hostStop counts an
// end that is not the guest's power-off as the host's.
func exitStatus(d launcher.Domain, hostStop bool) int {
	switch {
	case d.Reason == launcher.ReasonGuestShutdown:
		return ExitPoweredOff
	case d.Reason == launcher.ReasonHostRequest || hostStop:
		return ExitStopped
	default:
		return ExitFailed
	}
}
