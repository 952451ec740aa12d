package local

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/kemu-dev/kemu/api/launcherpod"
	"github.com/kemu-dev/kemu/ctl/cli"
	"github.com/kemu-dev/kemu/devices/kvm"
	"github.com/kemu-dev/kemu/launcher"
	"github.com/kemu-dev/kemu/launcher/cmdserver"
	"github.com/kemu-dev/kemu/launcher/memtrim"
	"github.com/kemu-dev/kemu/launcher/signals"
	"github.com/kemu-dev/kemu/launcher/unpriv"
	"github.com/kemu-dev/kemu/qmp"
)

// runVMI is kemuctl run.
func runVMI(cmd *cobra.Command, file string, o Options) error {
	out := cmd.OutOrStdout()
	vmi, err := readVMI(file, cmd.InOrStdin())
	if err != nil {
		fmt.Fprintln(cmd.ErrOrStderr(), err)
		return cli.ExitError{Code: 2}
	}
	nics, err := standaloneNICs(vmi, o.publish)
	if err != nil {
		fmt.Fprintln(cmd.ErrOrStderr(), err)
		return cli.ExitError{Code: 2}
	}
	for _, a := range o.then {
		if err := checkAction(a); err != nil {
			fmt.Fprintln(cmd.ErrOrStderr(), err)
			return cli.ExitError{Code: 2}
		}
	}
	dir := o.dir
	if dir == "" {
		if dir, err = newRunDir(vmi.Name); err != nil {
			return err
		}
	}
	cwd, _ := os.Getwd()
	var l *launcher.Launcher
	var hooks []func(context.Context, *qmp.Monitor) error
	if !o.allowRawQMP {
		hooks = append(hooks, func(ctx context.Context, m *qmp.Monitor) error {
			return cmdserver.RemoveDebugQMP(ctx, m, l.DebugQMPSocket())
		})
	}
	cfg := launcher.Config{
		VMI: vmi, Dir: dir, ImageCache: o.imageCache, BaseDir: cwd, Accel: o.accel, NICs: nics,
		KVMProbe:       kvm.Options{Kernel: o.probeKernel, Initrd: o.probeInitrd, CacheFile: o.probeCache},
		NoDeviceCgroup: o.noDeviceCgroup,
		// No kubelet: hugepages from the host's hugetlbfs, dedicated CPUs
		// from kemuctl's own affinity (taskset -c LIST kemuctl run …).
		HugepagesDir: "/dev/hugepages",
		Hooks:        hooks,
		VMStateDir:   o.vmState,
	}
	if o.serialLog != "" {
		sl, err := openSerialLog(o.serialLog)
		if err != nil {
			os.RemoveAll(dir)
			fmt.Fprintln(cmd.ErrOrStderr(), err)
			return cli.ExitError{Code: 2}
		}
		defer func() {
			if err := sl.Close(); err != nil {
				fmt.Fprintln(cmd.ErrOrStderr(), err)
			}
		}()
		cfg.ConsoleCopy = sl
	}
	l, err = launcher.New(cfg)
	if err != nil {
		os.RemoveAll(dir)
		fmt.Fprintln(cmd.ErrOrStderr(), err)
		return cli.ExitError{Code: 2}
	}

	t0 := time.Now()
	say := func(format string, args ...any) {
		fmt.Fprintf(out, "[%7.3fs] %s\n", time.Since(t0).Seconds(), fmt.Sprintf(format, args...))
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	say("starting %s/%s", vmi.Namespace, vmi.Name)
	ctx := context.Background()
	startCtx, cancelStart := context.WithCancel(ctx)
	go func() {
		select {
		case <-sigs:
			cancelStart()
		case <-startCtx.Done():
		}
	}()
	err = l.Start(startCtx)
	cancelStart()
	if err != nil {
		say("failed to start: %v", err)
		return cli.ExitError{Code: signals.ExitFailed}
	}
	for _, p := range l.Phases {
		say("  %-12s %s", p.Name, p.Took.Round(time.Microsecond))
	}
	d := l.Domain()
	say("QEMU pid %d, accelerator %s, runtime dir %s", d.PID, d.Accel, dir)
	switch why := l.AccelReason(); {
	case why != "" && d.Accel == "tcg":
		say("KVM not used, the guest runs under TCG (software emulation, slower): %s", why)
	case why != "":
		say("KVM used: %s", why)
	}
	if cg := l.DeviceCgroup(); cg != "" {
		say("QEMU's devices confined by cgroup %s", cg)
	} else {
		say("QEMU runs WITHOUT a device allowlist (--no-device-cgroup)")
	}
	if o.allowRawQMP {
		say("debug QMP socket: %s; console log: %s", l.DebugQMPSocket(), l.ConsoleLog())
	} else {
		say("console log: %s (no debug QMP socket without --%s)", l.ConsoleLog(), launcherpod.FlagAllowRawQMP)
	}
	// The command server, for kemuctl shell; its directory outlives the
	// runtime directory (removed when the VM ends) until kemuctl exits.
	sockDir := filepath.Clean(dir) + ".sockets"
	srv := cmdserver.New(cmdserver.Options{SocketsDir: sockDir, AllowRawQMP: o.allowRawQMP})
	if err := srv.Attach(l); err == nil {
		err = srv.Start(ctx)
		if err != nil {
			say("command server not started: %v", err)
		} else {
			defer os.RemoveAll(sockDir)
			defer srv.Stop()
			say("launcher socket: %s (kemuctl shell --socket %s)", srv.Socket(), srv.Socket())
		}
	}

	if os.Geteuid() == 0 {
		say("QEMU runs as uid %d gid %d without capabilities", unpriv.UID, unpriv.GID)
	}

	// The VM's setup is over: give back what only it used (launcher/memtrim).
	if _, err := memtrim.Release(); err != nil {
		say("%v", err)
	}

	w := l.Watch(true)
	go func() {
		last := ""
		for {
			d, err := w.Next(ctx)
			if err != nil {
				return
			}
			if s := d.String(); s != last { // pid and accelerator changes are printed above
				say("domain: %s", s)
				last = s
			}
			if d.State == launcher.StateShutoff {
				return
			}
		}
	}()
	if o.console {
		go attachConsole(l, cmd.InOrStdin(), out)
	}

	// --then's actions; a failed one stops QEMU at once, except a CI step
	// (exec, copy-in, copy-out): those all run and the guest is shut down
	// after them. The steps end when the VM does.
	stops := make(chan error, 1)
	shutdowns := make(chan string, 1)
	shutdown := func(why string) {
		select {
		case shutdowns <- why:
		default: // one is pending already
		}
	}
	actx, cancelActions := context.WithCancel(ctx)
	actionsDone := make(chan struct{})
	var steps stepsResult
	go func() {
		defer close(actionsDone)
		var err error
		steps, err = runActions(actx, l, o, say, out, cmd.ErrOrStderr())
		switch {
		case err != nil:
			stops <- err
		case steps.shutdown:
			shutdown("--then steps done")
		}
	}()
	if o.timeout > 0 {
		t := time.AfterFunc(o.timeout, func() { shutdown("--timeout reached") })
		defer t.Stop()
	}
	grace := time.Duration(*l.VMI().Spec.TerminationGracePeriodSeconds) * time.Second
	r := signals.Run(ctx, l, signals.Options{
		Signals: sigs, Shutdowns: shutdowns, Stops: stops,
		Grace:          func() time.Duration { return grace },
		KillEachSignal: true, StopIsHost: true,
		ShuttingDown: func(_ os.Signal, why string, grace time.Duration) {
			if why == "" {
				why = "interrupted"
			}
			say("%s: ACPI power-down, grace period %s", why, grace)
		},
		ShutdownFailed: func(err error) { say("shutdown: %v", err) },
		Stopping:       func(err error) { say("action failed: %v", err) },
		Killing:        func(os.Signal) { say("second signal: stopping QEMU now") },
	})
	say("ended: %s", r.Domain)
	cancelActions()
	<-actionsDone
	if r.Exit == signals.ExitPoweredOff && steps.failed > 0 {
		say("%d CI step(s) failed", steps.failed)
		return cli.ExitError{Code: ExitStepFailed}
	}
	if r.Exit == signals.ExitPoweredOff {
		return nil
	}
	return cli.ExitError{Code: r.Exit}
}
