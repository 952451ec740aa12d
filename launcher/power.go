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
func (l *Launcher) SoftReboot(ctx context.Context) (PowerMethod, error) {
	err := l.agentShutdown(ctx, qmp.ShutdownReboot)
	if err == nil {
		return MethodGuestAgent, nil
	}
	if !errors.Is(err, errNoAgent) {
		klog.InfoS("The guest agent did not take the reboot; sending Ctrl+Alt+Delete", "err", err)
	}
	return MethodCtrlAltDelete, l.mon.SendKey(ctx, 0, qmp.CtrlAltDelete...)
}

// Shutdown asks the guest to power off (GracefulShutdown) and returns the
// final state.
func (l *Launcher) Shutdown(ctx context.Context, grace time.Duration) (Domain, error) {
	d, _, err := l.GracefulShutdown(ctx, grace)
	return d, err
}

// GracefulShutdown asks the guest to power off — through the guest agent
// (guest-shutdown mode=powerdown) when it is connected, else with the ACPI
// power button — and presses the power button again every 5 s until the
// guest powers off or grace ends; then asks QEMU to quit, and kills it if
// it does not. It returns when QEMU is gone and everything is cleaned up,
// with the method of the first request.
func (l *Launcher) GracefulShutdown(ctx context.Context, grace time.Duration) (Domain, PowerMethod, error) {
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	tick := time.NewTicker(PowerdownInterval)
	defer tick.Stop()
	if l.Domain().State == StatePaused {
		// A paused guest can neither see the power button nor run its agent.
		_ = l.mon.Cont(ctx)
	}
	method := l.askPowerOff(ctx)
	for waiting := true; waiting; {
		select {
		case <-l.finished:
			d, err := l.Wait(ctx)
			return d, method, err
		case <-tick.C:
			l.pressPowerButton(ctx)
		case <-deadline.C:
			waiting = false
		case <-ctx.Done():
			waiting = false
		}
	}
	klog.InfoS("Guest did not power off in time; quitting QEMU", "grace", grace, "asked", method)
	d, err := l.Stop(context.Background())
	return d, method, err
}

// askPowerOff asks the guest once to power off: its agent if connected,
// else (or if the agent refused) the ACPI power button.
func (l *Launcher) askPowerOff(ctx context.Context) PowerMethod {
	err := l.agentShutdown(ctx, qmp.ShutdownPowerdown)
	if err == nil {
		klog.InfoS("Asked the guest agent to power the guest off", "vmi", klog.KObj(l.vmi))
		return MethodGuestAgent
	}
	if !errors.Is(err, errNoAgent) {
		klog.InfoS("The guest agent did not take the power-off; pressing the ACPI power button", "err", err)
	}
	l.pressPowerButton(ctx)
	return MethodACPI
}

func (l *Launcher) pressPowerButton(ctx context.Context) {
	if err := l.mon.SystemPowerdown(ctx); err != nil && !errors.Is(err, qmp.ErrClosed) {
		klog.ErrorS(err, "ACPI power button")
	}
}
