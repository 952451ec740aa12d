package local

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/kemu-dev/kemu/launcher"
	"github.com/kemu-dev/kemu/launcher/signals"
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
	case "exec":
		if strings.TrimSpace(val) == "" {
			return fmt.Errorf("--then %s: want exec=COMMAND", a)
		}
		return nil
	case "copy-in", "copy-out":
		_, _, err := copyPaths(name, val)
		return err
	}
	return fmt.Errorf("--then %s: unknown action (pause, unpause, agent, shutdown, stop, sleep=DURATION, exec=COMMAND, copy-in=HOST:GUEST, copy-out=HOST:GUEST)", a)
}

// isCheck says that an action is a CI step: exec, copy-in, copy-out. A
// failed one does not stop the VM: the next steps run, and kemuctl exits 1.
func isCheck(a string) bool {
	name, _, _ := strings.Cut(a, "=")
	return name == "exec" || name == "copy-in" || name == "copy-out"
}

// stepsResult is what --then's steps came to.
type stepsResult struct {
	// failed counts the exec and copy steps that failed.
	failed int
	// shutdown: the steps had an exec or copy and did not end the VM
	// (shutdown, stop last), so the VM is shut down now.
	shutdown bool
}

// endsWithCheckShutdown says whether the actions get an implicit shutdown.
func endsWithCheckShutdown(then []string) bool {
	hasCheck := false
	for _, a := range then {
		hasCheck = hasCheck || isCheck(a)
	}
	if !hasCheck {
		return false
	}
	last := then[len(then)-1]
	return last != "shutdown" && last != "stop"
}

// runActions performs --wait-agent and --then, printing each step's time;
// an exec's output goes to stdout and stderr as it arrives. The exec steps
// are written to o.junit at the end. A failed exec or copy is counted and
// the next steps run; any other failed action ends them with its error.
func runActions(ctx context.Context, l *launcher.Launcher, o Options, say func(string, ...any), stdout, stderr io.Writer) (res stepsResult, err error) {
	start := time.Now()
	var cases []execCase
	defer func() {
		if o.junit == "" {
			return
		}
		if err != nil { // the exec steps never run are errors in the report
			for _, a := range o.then[len(cases):] {
				if name, val, _ := strings.Cut(a, "="); name == "exec" {
					cases = append(cases, execCase{command: val, err: fmt.Errorf("not run: %w", err)})
				}
			}
		}
		var done []execCase
		for _, c := range cases {
			if c.command != "" {
				done = append(done, c)
			}
		}
		if jerr := writeJUnit(o.junit, l.VMI().Namespace, l.VMI().Name, start, done); jerr != nil {
			say("%v", jerr)
			res.failed++
		}
	}()

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
	// connected waits (up to --agent-timeout) for the agent an exec or copy needs.
	connected := func() error {
		actx, cancel := context.WithTimeout(ctx, o.agentTimeout)
		defer cancel()
		_, err := l.Agent(actx)
		return err
	}
	if o.waitAgent {
		if err := step("guest agent", agent); err != nil {
			return res, err
		}
	}
	grace := time.Duration(*l.VMI().Spec.TerminationGracePeriodSeconds) * time.Second
	for _, a := range o.then {
		name, val, _ := strings.Cut(a, "=")
		if isCheck(a) {
			c := runCheck(ctx, l, name, val, o.junit != "", connected, say, stdout, stderr)
			if c.err != nil || c.result != "" {
				res.failed++
			}
			if name != "exec" {
				c = execCase{} // only execs are test cases
			}
			cases = append(cases, c)
			continue
		}
		cases = append(cases, execCase{})
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
			cases = cases[:len(cases)-1]
			return res, err
		}
	}
	res.shutdown = endsWithCheckShutdown(o.then)
	return res, nil
}

// runCheck runs one exec, copy-in or copy-out step and reports it; with
// capture, an exec's output is kept for the JUnit report too.
func runCheck(ctx context.Context, l *launcher.Launcher, name, val string, capture bool, connected func() error,
	say func(string, ...any), stdout, stderr io.Writer) execCase {
	t := time.Now()
	c := execCase{}
	if name == "exec" {
		c.command = val
	}
	if err := connected(); err != nil {
		c.err = err
		c.took = time.Since(t)
		say("%s=%s: FAILED: %v", name, val, err)
		return c
	}
	switch name {
	case "exec":
		var outBuf, errBuf bytes.Buffer
		o, e := stdout, stderr
		if capture {
			o, e = io.MultiWriter(stdout, &outBuf), io.MultiWriter(stderr, &errBuf)
		}
		r, err := l.Exec(ctx, val, o, e)
		c.took, c.err, c.stdout, c.stderr = time.Since(t), err, outBuf.Bytes(), errBuf.Bytes()
		for _, tr := range []struct {
			stream string
			cut    bool
		}{{"stdout", r.StdoutTruncated}, {"stderr", r.StderrTruncated}} {
			if tr.cut {
				say("exec %q: %s over %d MiB, the rest dropped", val, tr.stream, launcher.MaxExecOutput>>20)
			}
		}
		switch {
		case err != nil:
			say("exec %q: FAILED: %v", val, err)
		case !r.OK():
			c.result = r.String()
			say("exec %q: FAILED: %s after %s", val, r, c.took.Round(time.Millisecond))
		default:
			say("exec %q: %s in %s", val, r, c.took.Round(time.Millisecond))
		}
	case "copy-in", "copy-out":
		host, guest, _ := copyPaths(name, val)
		var n int64
		if name == "copy-in" {
			n, c.err = l.CopyIn(ctx, host, guest)
		} else {
			n, c.err = l.CopyOut(ctx, guest, host)
		}
		c.took = time.Since(t)
		if c.err != nil {
			say("%s=%s: FAILED: %v", name, val, c.err)
		} else {
			say("%s=%s: %d bytes in %s", name, val, n, c.took.Round(time.Millisecond))
		}
	}
	return c
}

// ExitStepFailed is kemuctl run's exit status when the VM ended well but a
// CI step (exec, copy-in, copy-out) failed: the status of a VM that failed
// to start or crashed (signals.ExitFailed), so 0 still means all is well.
const ExitStepFailed = signals.ExitFailed
