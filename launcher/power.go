package launcher

import (
	"context"
	"errors"
	"time"

	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/qmp"
)

// SoftReboot asks the guest OS to reboot itself: through the guest agent
// (guest-shutdown mode=reboot) when it is connected, else Ctrl+Alt+Delete
// on its keyboard (Linux and Windows reboot cleanly; a guest may ignore
// it). It returns the method used.
func (l *Launcher) SoftReboot(ctx context.Context) (RebootMethod, error) {
	err := l.agentShutdown(ctx, qmp.ShutdownReboot)
	if err == nil {
		return MethodGuestAgent, nil
	}
	if !errors.Is(err, errNoAgent) {
		klog.InfoS("The guest agent did not take the reboot; sending Ctrl+Alt+Delete", "err", err)
	}
	return MethodCtrlAltDelete, l.mon.SendKey(ctx, 0, qmp.CtrlAltDelete...)
}

// Shutdown asks the guest to power off with the ACPI power button, as
// KubeVirt's graceful shutdown does, pressing it again every
// PowerdownInterval until the guest powers off or grace ends; then asks
// QEMU to quit, and kills it if it does not. It returns when QEMU is gone
// and everything is cleaned up. (The guest agent is for SoftReboot only: a
// guest that ignores the button is the case grace and the kill are for.)
func (l *Launcher) Shutdown(ctx context.Context, grace time.Duration) (Domain, error) {
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	tick := time.NewTicker(PowerdownInterval)
	defer tick.Stop()
	if l.Domain().State == StatePaused {
		// A paused guest cannot see the power button.
		_ = l.mon.Cont(ctx)
	}
	l.pressPowerButton(ctx)
	for waiting := true; waiting; {
		select {
		case <-l.finished:
			return l.Wait(ctx)
		case <-tick.C:
			l.pressPowerButton(ctx)
		case <-deadline.C:
			waiting = false
		case <-ctx.Done():
			waiting = false
		}
	}
	klog.InfoS("Guest did not power off in time; quitting QEMU", "grace", grace)
	return l.Stop(context.Background())
}

// Signaled records on the domain (StopSignal) that a stop signal named sig
// came while the VM ran, before the graceful shutdown it starts: the node
// agent reads it to tell the kubelet's own stop (a failed livenessProbe, an
// eviction) from a deletion. Only the first one is kept.
func (l *Launcher) Signaled(sig string) {
	if l.state != nil {
		l.state.handle(event{kind: evStopSignal, message: sig})
	}
}

func (l *Launcher) pressPowerButton(ctx context.Context) {
	if err := l.mon.SystemPowerdown(ctx); err != nil && !errors.Is(err, qmp.ErrClosed) {
		klog.ErrorS(err, "ACPI power button")
	}
}
