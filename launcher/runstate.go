package launcher

import (
	"context"
	"fmt"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// resume ends a normal start: the guest runs (cont), unless its
// startStrategy is Paused.
func (l *Launcher) resume(ctx context.Context) error {
	if s := l.vmi.Spec.StartStrategy; s != nil && *s == v1.StartStrategyPaused {
		l.state.handle(event{kind: evStartPaused})
		return nil
	}
	if err := l.mon.Cont(ctx); err != nil {
		return fmt.Errorf("launcher: resuming the guest: %w", err)
	}
	l.state.handle(event{kind: evBooted})
	return nil
}

// Pause stops the guest's CPUs.
func (l *Launcher) Pause(ctx context.Context) error {
	l.state.handle(event{kind: evPauseAsked, on: true})
	w := l.Watch(false)
	if err := l.mon.Stop(ctx); err != nil {
		return err
	}
	_, err := w.WaitFor(ctx, InState(StatePaused, StateShutoff))
	return err
}

// Unpause resumes the guest's CPUs.
func (l *Launcher) Unpause(ctx context.Context) error {
	l.state.handle(event{kind: evPauseAsked, on: false})
	w := l.Watch(false)
	if err := l.mon.Cont(ctx); err != nil {
		return err
	}
	_, err := w.WaitFor(ctx, InState(StateRunning, StateShutoff))
	return err
}

// Reset resets the machine.
func (l *Launcher) Reset(ctx context.Context) error { return l.mon.SystemReset(ctx) }
