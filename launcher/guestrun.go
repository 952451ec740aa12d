package launcher

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// GuestRun runs argv (no shell) in the guest through the guest agent,
// output not captured, and polls until it exits or ctx ends (the command
// then goes on in the guest: the agent cannot kill it). A VMI's exec probe
// runs through it (kemu-launcher probe → the GuestExec RPC).
func (l *Launcher) GuestRun(ctx context.Context, argv []string) (ExecResult, error) {
	var res ExecResult
	if len(argv) == 0 || argv[0] == "" {
		return res, errors.New("launcher: guest run: no command")
	}
	a, err := l.Agent(ctx)
	if err != nil {
		return res, err
	}
	pid, err := a.Exec(ctx, argv[0], argv[1:], nil, false)
	if err != nil {
		return res, fmt.Errorf("launcher: guest run %s: %w", argv[0], err)
	}
	wait := 10 * time.Millisecond
	for {
		st, err := a.ExecStatus(ctx, pid)
		if err != nil {
			return res, fmt.Errorf("launcher: guest run %s: status of pid %d: %w", argv[0], pid, err)
		}
		if st.Exited {
			res.ExitCode, res.Signal = st.ExitCode, st.Signal
			return res, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return res, fmt.Errorf("launcher: guest run %s: pid %d still running in the guest: %w", argv[0], pid, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}
