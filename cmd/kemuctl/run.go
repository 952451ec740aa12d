package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/kemu-dev/kemu/api/launcherpod"
	"github.com/kemu-dev/kemu/api/manifest"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/ctl/cli"
	"github.com/kemu-dev/kemu/ctl/manifests"
	"github.com/kemu-dev/kemu/devices/kvm"
	"github.com/kemu-dev/kemu/launcher"
	"github.com/kemu-dev/kemu/launcher/cmdline"
	"github.com/kemu-dev/kemu/launcher/cmdserver"
	"github.com/kemu-dev/kemu/launcher/signals"
	"github.com/kemu-dev/kemu/launcher/unpriv"
	"github.com/kemu-dev/kemu/qmp"
)

type runOptions struct {
	dir, imageCache, accel, probeCache string
	probeKernel, probeInitrd           string
	console, waitAgent, noDeviceCgroup bool
	allowRawQMP                        bool
	timeout, agentTimeout              time.Duration
	then                               []string
	publish                            []string
}

func newRunCommand() *cobra.Command {
	o := runOptions{}
	cmd := &cobra.Command{
		Use:   "run [flags] VMI.yaml",
		Short: "Run a VirtualMachineInstance on this machine, without a cluster",
		Long: `run validates the VMI and runs it in the foreground with kemu's launcher:
QEMU is started paused, connected over QMP and resumed; every state change is
printed. Ctrl-C presses the ACPI power button and waits the VMI's
terminationGracePeriodSeconds before stopping QEMU; a second Ctrl-C stops it at
once (files are cleaned up either way).

The pod network (masquerade) becomes QEMU user networking; --publish forwards
host ports to the guest. containerDisk and kernelBoot images are read from
oci:DIR, oci-archive:FILE, docker-archive:FILE or a registry, cached.

--then runs actions once the guest is up (after --wait-agent): pause, unpause,
agent, shutdown, stop, sleep=DURATION.

kemuctl shell on the printed launcher socket sends only read-only QMP
commands (query-*) unless --allow-raw-qmp is given, which also keeps QEMU's
second QMP socket for a debugging client.

Exit status: 0 the guest powered off; 1 failed to start or crashed; 2 bad
input; 3 stopped by the host (grace period over, --timeout, second Ctrl-C).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runVMI(cmd, args[0], o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.dir, "dir", "", "runtime directory (default: a new one under $TMPDIR)")
	f.StringVar(&o.imageCache, "image-cache", defaultCacheDir("images"), "cache of container image files")
	f.StringVar(&o.accel, "accel", "", `accelerator: kvm, tcg, or "" to probe KVM`)
	f.StringVar(&o.probeCache, "kvm-probe-cache", defaultCacheDir("kvm-probe.json"), "where the KVM probe's verdict is cached")
	f.StringVar(&o.probeKernel, "kvm-probe-kernel", "_out/testguest/vmlinuz", "kernel of the guest the KVM probe boots")
	f.StringVar(&o.probeInitrd, "kvm-probe-initrd", "_out/testguest/initrd.img", "initramfs of the guest the KVM probe boots")
	f.BoolVar(&o.console, "console", false, "attach the serial console to this terminal")
	f.BoolVar(&o.waitAgent, "wait-agent", false, "wait for the guest agent to answer")
	f.DurationVar(&o.agentTimeout, "agent-timeout", 3*time.Minute, "how long --wait-agent waits")
	f.DurationVar(&o.timeout, "timeout", 0, "shut the VM down gracefully after this long (0: never)")
	f.StringSliceVar(&o.then, "then", nil, "actions after start: pause, unpause, agent, shutdown, stop, sleep=DURATION")
	f.BoolVar(&o.noDeviceCgroup, "no-device-cgroup", false, "run QEMU without its cgroup v2 device allowlist (hosts without cgroup2)")
	f.StringSliceVar(&o.publish, "publish", nil, "forward a host port to the guest: [ADDR:]HOSTPORT:GUESTPORT[/udp]")
	f.BoolVar(&o.allowRawQMP, launcherpod.FlagAllowRawQMP, false, "debugging: let kemuctl shell send any QMP command and keep QEMU's second QMP socket (default: read-only commands, no second socket)")
	return cmd
}

// defaultCacheDir is the user's cache; for root /var/cache/kemu, because
// QEMU runs as its own user (launcher/unpriv) and cannot traverse /root to
// read cached images.
func defaultCacheDir(name string) string {
	if os.Geteuid() == 0 {
		return filepath.Join("/var/cache/kemu", name)
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "kemu", name)
}

// runVMI is kemuctl run.
func runVMI(cmd *cobra.Command, file string, o runOptions) error {
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
	l, err = launcher.New(launcher.Config{
		VMI: vmi, Dir: dir, ImageCache: o.imageCache, BaseDir: cwd, Accel: o.accel, NICs: nics,
		KVMProbe:       kvm.Options{Kernel: o.probeKernel, Initrd: o.probeInitrd, CacheFile: o.probeCache},
		NoDeviceCgroup: o.noDeviceCgroup,
		Hooks:          hooks,
	})
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

	// --then's actions; a failed one stops QEMU at once.
	stops := make(chan error, 1)
	go func() {
		if err := runActions(ctx, l, o, say); err != nil {
			stops <- err
		}
	}()
	shutdowns := make(chan string, 1)
	if o.timeout > 0 {
		t := time.AfterFunc(o.timeout, func() { shutdowns <- "--timeout reached" })
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
	if r.Exit == signals.ExitPoweredOff {
		return nil
	}
	return cli.ExitError{Code: r.Exit}
}

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
func runActions(ctx context.Context, l *launcher.Launcher, o runOptions, say func(string, ...any)) error {
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

// attachConsole copies the guest's serial output to out and in to the guest.
func attachConsole(l *launcher.Launcher, in io.Reader, out io.Writer) {
	output, input, detach, err := l.Console()
	if err != nil {
		fmt.Fprintln(out, err)
		return
	}
	defer detach()
	go func() { _, _ = io.Copy(input, in) }()
	for b := range output {
		_, _ = out.Write(b)
	}
}

// readVMI reads the one VirtualMachineInstance of a manifest.
func readVMI(file string, stdin io.Reader) (*v1.VirtualMachineInstance, error) {
	docs, err := manifests.Read(file, stdin)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var vmis []*v1.VirtualMachineInstance
	for _, d := range docs {
		if len(d.Errors) > 0 {
			var b strings.Builder
			for _, e := range d.Errors {
				fmt.Fprintf(&b, "\n  %s", e.Error())
			}
			return nil, fmt.Errorf("%s#%d %s is not valid:%s", file, d.Index, d.Describe(), b.String())
		}
		if vmi, ok := d.Object.(*v1.VirtualMachineInstance); ok {
			vmis = append(vmis, vmi)
		}
	}
	if len(vmis) != 1 {
		return nil, fmt.Errorf("%s: %d VirtualMachineInstances, want exactly one (a %s runs in a cluster)", file, len(vmis), manifest.KindVM)
	}
	if vmis[0].Namespace == "" {
		vmis[0].Namespace = "default"
	}
	return vmis[0], nil
}

// maxRunDirName is how much of the VMI's name the run directory's name
// takes: /tmp/kemu-<32>-<10 digits>/qmp-debug.sock is 74 bytes, within a
// unix socket path's 107.
const maxRunDirName = 32

// newRunDir makes the runtime directory of a VMI named name under the
// temporary directory, named after its host name, cut: a VMI name may have
// 253 characters, a file name 255, and the QMP and console sockets in the
// directory must fit in sun_path.
func newRunDir(name string) (string, error) {
	host := v1.DeriveHostname(name)
	return os.MkdirTemp("", "kemu-"+host[:min(len(host), maxRunDirName)]+"-")
}

// standaloneNICs maps the VMI's pod network to QEMU user networking.
func standaloneNICs(vmi *v1.VirtualMachineInstance, publish []string) ([]cmdline.NIC, error) {
	var fwd []cmdline.Forward
	for _, p := range publish {
		f, err := parsePublish(p)
		if err != nil {
			return nil, err
		}
		fwd = append(fwd, f)
	}
	nets := map[string]*v1.Network{}
	for i := range vmi.Spec.Networks {
		nets[vmi.Spec.Networks[i].Name] = &vmi.Spec.Networks[i]
	}
	if mq := vmi.Spec.Domain.Devices.NetworkInterfaceMultiqueue; mq != nil && *mq && len(vmi.Spec.Domain.Devices.Interfaces) > 0 {
		return nil, errors.New("spec.domain.devices.networkInterfaceMultiqueue: kemuctl run uses QEMU user networking, which has one queue (multiqueue needs taps: run the VMI on a cluster)")
	}
	var nics []cmdline.NIC
	for i, iface := range vmi.Spec.Domain.Devices.Interfaces {
		if iface.Masquerade == nil {
			return nil, fmt.Errorf("spec.domain.devices.interfaces[%d]: kemuctl run supports the masquerade binding only (bridge needs a pod network)", i)
		}
		cidr := "10.0.2.0/24"
		if n := nets[iface.Name]; n != nil && n.Pod != nil && n.Pod.VMNetworkCIDR != "" {
			cidr = n.Pod.VMNetworkCIDR
		}
		nic := cmdline.NIC{Name: iface.Name, MAC: iface.MacAddress, Model: iface.Model,
			User: &cmdline.UserNet{Net: cidr}}
		if len(nics) == 0 {
			nic.User.Forwards = fwd
		}
		nics = append(nics, nic)
	}
	if len(fwd) > 0 && len(nics) == 0 {
		return nil, errors.New("--publish: the VMI has no masquerade interface")
	}
	return nics, nil
}

// parsePublish parses [ADDR:]HOSTPORT:GUESTPORT[/udp].
func parsePublish(s string) (cmdline.Forward, error) {
	f := cmdline.Forward{Proto: "tcp", HostAddr: "127.0.0.1"}
	spec, proto, ok := strings.Cut(s, "/")
	if ok {
		if proto != "tcp" && proto != "udp" {
			return f, fmt.Errorf("--publish %s: protocol %q is not tcp or udp", s, proto)
		}
		f.Proto = proto
	}
	parts := strings.Split(spec, ":")
	if len(parts) == 3 {
		if net.ParseIP(parts[0]) == nil {
			return f, fmt.Errorf("--publish %s: %q is not an IP address", s, parts[0])
		}
		f.HostAddr, parts = parts[0], parts[1:]
	}
	if len(parts) != 2 {
		return f, fmt.Errorf("--publish %s: want [ADDR:]HOSTPORT:GUESTPORT[/udp]", s)
	}
	var err error
	if f.HostPort, err = port(parts[0]); err == nil {
		f.GuestPort, err = port(parts[1])
	}
	if err != nil {
		return f, fmt.Errorf("--publish %s: %w", s, err)
	}
	return f, nil
}

func port(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("%q is not a port (1-65535)", s)
	}
	return n, nil
}
