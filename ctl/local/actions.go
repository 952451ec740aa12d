package local

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/kemu-dev/kemu/launcher"
)

// checkAction validates one --then action.
func checkAction(a string) error {
	name, val, _ := strings.Cut(a, "=")
	switch name {
	case "pause", "unpause", "agent", "shutdown", "stop":
		return nil
	case "sleep":
		_, err := time.ParseDuration(val)
		if err != nil {
			return fmt.Errorf("--then %s: %w", a, err)
		}
		return nil
	}
	return fmt.Errorf("--then %s: unknown action (pause, unpause, agent, shutdown, stop, sleep=DURATION)", a)
}

// runActions performs --wait-agent and --then, printing each step's time.
func runActions(ctx context.Context, l *launcher.Launcher, o Options, say func(string, ...any)) error {
	step := func(what string, f func() error) error {
		t := time.Now()
		if err := f(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		say("%s: done in %s", what, time.Since(t).Round(time.Millisecond))
		return nil
	}
	agent := func() error {
		actx, cancel := context.WithTimeout(ctx, o.agentTimeout)
		defer cancel()
		if err := l.GuestPing(actx); err != nil {
			return err
		}
		a, err := l.Agent(actx)
		if err != nil {
			return err
		}
		info, err := a.OSInfo(actx)
		if err != nil {
			return err
		}
		say("guest agent answers: %s, kernel %s", info.PrettyName, info.KernelRelease)
		return nil
	}
	if o.waitAgent {
		if err := step("guest agent", agent); err != nil {
			return err
		}
	}
	grace := time.Duration(*l.VMI().Spec.TerminationGracePeriodSeconds) * time.Second
	for _, a := range o.then {
		name, val, _ := strings.Cut(a, "=")
		var f func() error
		switch name {
		case "pause":
			f = func() error { return l.Pause(ctx) }
		case "unpause":
			f = func() error { return l.Unpause(ctx) }
		case "agent":
			f = agent
		case "shutdown":
			f = func() error {
				d, err := l.Shutdown(ctx, grace)
				if err == nil && d.Reason != launcher.ReasonGuestShutdown {
					err = fmt.Errorf("the guest did not power off within %s: %s", grace, d)
				}
				return err
			}
		case "stop":
			f = func() error { _, err := l.Stop(ctx); return err }
		case "sleep":
			dur, _ := time.ParseDuration(val)
			f = func() error {
				t := time.NewTimer(dur)
				defer t.Stop()
				<-t.C
				return nil
			}
		}
		if err := step(a, f); err != nil {
			return err
		}
	}
	return nil
}
