package launcher

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/qmp"
)

// connect dials QEMU's monitor (capabilities negotiated by qmp.Dial),
// follows its events from the connection on, attaches the serial console,
// runs the pre-start hooks and starts following QEMU's events and its exit.
// QEMU is still paused.
func (l *Launcher) connect(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, qmpConnectTimeout)
	defer cancel()
	err := l.timed("qmp-connect", func() error {
		var err error
		if l.mon, err = l.dialQMP(cctx); err != nil {
			return err
		}
		l.events = l.mon.Subscribe(qmp.SinceConnect(), qmp.WithBuffer(1024))
		return nil
	})
	if err != nil {
		return err
	}
	err = l.timed("attach", func() error {
		if l.vmi.Spec.Domain.Devices.AutoattachSerialConsole == nil || *l.vmi.Spec.Domain.Devices.AutoattachSerialConsole {
			if l.con, err = startConsole(cctx, l.paths.Serial, filepath.Join(l.cfg.Dir, "console.log"), l.cfg.ConsoleLogSize, l.cfg.ConsoleCopy); err != nil {
				return fmt.Errorf("launcher: serial console: %w", err)
			}
		}
		if err := l.initialLinks(ctx); err != nil {
			return err
		}
		for i, h := range l.cfg.Hooks {
			if err := h(ctx, l.mon); err != nil {
				return fmt.Errorf("launcher: pre-start hook %d: %w", i, err)
			}
		}
		l.pollBalloonStats(cctx)
		return nil
	})
	if err != nil {
		return err
	}
	go l.followEvents()
	go l.supervise()
	go l.refreshDownwardMetrics()
	go l.serveDownwardMetrics()
	return nil
}

// dialQMP connects to QEMU's monitor, giving up at once if QEMU exits.
func (l *Launcher) dialQMP(ctx context.Context) (*qmp.Monitor, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-l.exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	m, err := qmp.Dial(ctx, l.paths.QMP)
	if err != nil {
		// QEMU failing at start (a disk it cannot open) resets the monitor
		// connection before its exit is reaped: wait a moment for the
		// exit, so the error carries QEMU's own words.
		grace := time.NewTimer(qemuExitGrace)
		defer grace.Stop()
		select {
		case <-l.exited:
			out := l.stderr.String()
			return nil, fmt.Errorf("launcher: QEMU exited at start (%v): %s%s", l.exitErr, out, permissionHint(out))
		case <-grace.C:
		}
		return nil, fmt.Errorf("launcher: QMP: %w", err)
	}
	return m, nil
}

// qemuExitGrace: how long a failed monitor connection waits for QEMU's
// exit to be reaped.
const qemuExitGrace = 2 * time.Second

// followEvents feeds QMP events to the state machine.
func (l *Launcher) followEvents() {
	ctx := context.Background()
	for {
		ev, err := l.events.Next(ctx)
		var lost *qmp.EventsLostError
		if errors.As(err, &lost) {
			klog.InfoS("QMP events lost; re-reading the state", "count", lost.Count)
			l.refreshState(ctx)
			continue
		}
		if err != nil {
			return
		}
		klog.V(2).InfoS("QMP event", "event", ev.Name, "data", ev.Data)
		switch ev.Name {
		case "STOP":
			l.refreshState(ctx)
		case "RESUME":
			l.state.handle(event{kind: evResume})
		case "POWERDOWN":
			l.state.handle(event{kind: evPowerdown})
		case "SHUTDOWN":
			l.state.handle(event{kind: evShutdown, guest: ev.String("guest") == "true", message: ev.String("reason")})
		case "GUEST_PANICKED":
			l.state.handle(event{kind: evPanicked, message: ev.String("action")})
		case "WATCHDOG":
			klog.InfoS("Guest watchdog fired", "action", ev.String("action"))
			l.state.handle(event{kind: evWatchdog, message: ev.String("action")})
		case "RESET":
			klog.InfoS("Guest reset", "guest", ev.String("guest"), "reason", ev.String("reason"))
			l.dropAgent() // the guest's agent starts over with the guest
		case "VSERPORT_CHANGE":
			if ev.String("open") == "false" {
				l.dropAgent() // the guest closed its agent port
			}
		}
	}
}

// refreshState asks QEMU for its run state after a STOP (or lost events).
func (l *Launcher) refreshState(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := l.mon.QueryStatus(ctx)
	if err != nil {
		return
	}
	l.state.handle(event{kind: evStatus, status: st.Status, running: st.Running})
}
