// kemu-launcher runs one VM in the launcher pod behind the command server
// (launcher/cmdserver): the node agent calls it over
// <sockets-dir>/launcher.sock, which appears (renamed from
// launcher-init.sock) once the server answers.
//
// The VMI comes from --vmi-file (JSON or YAML), --vmi-json, or the first
// Sync RPC; without a VMI flag the launcher serves and waits for a Sync for
// up to --qemu-timeout, then exits 1. SIGTERM/SIGINT shut the guest down
// gracefully (--grace-period, else the VMI's terminationGracePeriodSeconds)
// and exit (3 even when the guest powered off, unless the node agent also
// asked for the stop through the Shutdown or Kill RPC: a signal alone is
// the kubelet's own stop); before the VM started (no Sync yet, or its start under way:
// cancelled, and a VM started all the same is killed) they exit 3, so that
// a VM with runStrategy RerunOnFailure starts it again. Exit status: 0 the
// guest powered off; 1 the VM failed to start or crashed, or no Sync came;
// 2 bad flags or VMI; 3 the host stopped it (grace period over, killed, a
// signal before the VM started, or a signal without the node agent's
// Shutdown RPC).
//
// `kemu-launcher probe ...` is a VMI's exec or guestAgentPing probe, run by
// the kubelet in the compute container (probe.go).
//
// --allow-raw-qmp (debugging only; the controller never sets it) lets the
// Qmp RPC pass any QMP command and keeps QEMU's second QMP socket; without
// it the Qmp RPC passes only read-only ones (launcher/cmdserver).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/api/launcherpod"
	"github.com/kemu-dev/kemu/launcher"
	"github.com/kemu-dev/kemu/launcher/cmdserver"
	"github.com/kemu-dev/kemu/launcher/dropcaps"
	"github.com/kemu-dev/kemu/launcher/memtrim"
	"github.com/kemu-dev/kemu/launcher/rpc"
	"github.com/kemu-dev/kemu/launcher/signals"
	"github.com/kemu-dev/kemu/launcher/unpriv"
	"github.com/kemu-dev/kemu/netsetup"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() { os.Exit(run()) }

func run() int {
	if len(os.Args) > 1 && os.Args[1] == launcherpod.ProbeSubcommand {
		return runProbe(os.Args[2:], os.Stdout, os.Stderr)
	}
	var (
		vmiFile, vmiJSON, qemu, baseDir string
		qemuTimeout                     time.Duration
		noDeviceCgroup, podNetwork      bool
		podInterface, resolvConf        string
	)
	fs := flag.NewFlagSet("kemu-launcher", flag.ContinueOnError)
	fs.StringVar(&vmiFile, "vmi-file", "", "the VirtualMachineInstance (JSON or YAML); none: wait for a Sync")
	fs.StringVar(&vmiJSON, "vmi-json", "", "the VirtualMachineInstance as JSON; none: wait for a Sync")
	// The launcher Pod's contract: what controller/template renders.
	pc := launcherpod.Defaults()
	pc.Bind(fs)
	fs.StringVar(&baseDir, "base-dir", "", "resolves relative oci: image paths (default: the working directory)")
	fs.StringVar(&qemu, "qemu", "qemu-system-x86_64", "the QEMU binary")
	fs.BoolVar(&noDeviceCgroup, "no-device-cgroup", false, "run QEMU without its cgroup v2 device allowlist (only for hosts without cgroup2)")
	fs.BoolVar(&podNetwork, "pod-network", true, "wire the VMI's pod-network interfaces in this network namespace (taps, bridge, nftables, DHCP); false: the VMI must have no pod-network interface")
	fs.StringVar(&podInterface, "pod-interface", netsetup.DefaultPodInterface, "the pod network's interface")
	fs.StringVar(&resolvConf, "resolv-conf", netsetup.DefaultResolvConf, "DNS servers and search domains for the guest's DHCP lease")
	fs.DurationVar(&qemuTimeout, "qemu-timeout", 5*time.Minute, "exit if no VMI arrives (Sync) within this long")
	klog.InitFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	defer klog.Flush()
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "kemu-launcher: unexpected arguments %v\n", fs.Args())
		return 2
	}
	if vmiFile != "" && vmiJSON != "" {
		fmt.Fprintln(os.Stderr, "kemu-launcher: --vmi-file and --vmi-json are exclusive")
		return 2
	}
	var vmiBytes []byte
	switch {
	case vmiFile != "":
		b, err := os.ReadFile(vmiFile)
		if err != nil {
			klog.ErrorS(err, "Reading the VMI")
			return 2
		}
		vmiBytes = b
	case vmiJSON != "":
		vmiBytes = []byte(vmiJSON)
	}
	if vmiBytes != nil {
		vmi, err := cmdserver.DecodeVMI(vmiBytes)
		if err != nil {
			klog.ErrorS(errors.New(status.Convert(err).Message()), "Bad VMI")
			return 2
		}
		if pc.VMIUID != "" && vmi.UID != pc.VMIUID {
			klog.ErrorS(nil, "The VMI is not the one --"+launcherpod.FlagVMIUID+" names", "uid", vmi.UID, launcherpod.FlagVMIUID, pc.VMIUID)
			return 2
		}
	}
	if baseDir == "" {
		baseDir, _ = os.Getwd()
	}
	if abs, err := filepath.Abs(pc.RuntimeDir); err == nil {
		pc.RuntimeDir = abs
	}

	// QEMU's user owns its taps (launcher/unpriv).
	qemuID := unpriv.ForQEMU(os.Geteuid())
	var podNet *netsetup.Options
	if podNetwork {
		podNet = &netsetup.Options{PodInterface: podInterface, ResolvConf: resolvConf, TapUID: qemuID.UID, TapGID: qemuID.GID}
	}
	srv := cmdserver.New(cmdserver.Options{
		SocketsDir: pc.SocketsDir, GracePeriod: pc.GracePeriod, Version: version, VMIUID: pc.VMIUID,
		Config: launcher.Config{Dir: pc.RuntimeDir, ImageCache: pc.ImageCache, BaseDir: baseDir, QEMU: qemu,
			Accel: pc.Accel, NodeName: pc.NodeName, PVCRoot: pc.PVCRoot, SecretsDir: pc.SecretsDir, ConfigDir: pc.ConfigDir, ContainerDiskDir: pc.ContainerDiskDir, KernelBootDir: pc.KernelBootDir, ImagesMounted: pc.ImageVolumes,
			NoDeviceCgroup: noDeviceCgroup, PodNetwork: podNet, HugepagesDir: launcherpod.HugepagesDir, VMStateDir: launcherpod.VMStateDir},
		AllowRawQMP: pc.AllowRawQMP,
	})
	if pc.AllowRawQMP {
		klog.InfoS("Raw QMP allowed: the Qmp RPC passes any command and QEMU's debug QMP socket stays (debugging only)", "flag", "--"+launcherpod.FlagAllowRawQMP)
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	ctx := context.Background()
	if err := srv.Start(ctx); err != nil {
		klog.ErrorS(err, "Command server")
		return 1
	}
	defer srv.Stop()
	klog.InfoS("kemu-launcher serving", "version", version, "socket", srv.Socket())

	if vmiBytes != nil {
		go func() {
			if _, err := srv.Sync(ctx, &rpc.SyncRequest{VmiJson: vmiBytes}); err != nil {
				klog.ErrorS(err, "Starting the VM from the flags")
			}
		}()
	}
	timeout := time.NewTimer(qemuTimeout)
	defer timeout.Stop()
	select {
	case <-srv.Started():
	case <-timeout.C:
		klog.ErrorS(nil, "No VMI arrived (Sync) within --qemu-timeout; exiting", "qemuTimeout", qemuTimeout)
		return 1
	case sig := <-sigs:
		// Not a success: the VM never ran (RerunOnFailure restarts it).
		klog.InfoS("Signal before the VM started; not starting it", "signal", sig)
		actx, cancel := context.WithTimeout(ctx, time.Minute)
		d, killed, err := srv.Abandon(actx)
		cancel()
		switch {
		case err != nil:
			klog.ErrorS(err, "Stopping the VM's start")
		case killed:
			klog.InfoS("Killed the VM that started meanwhile", "state", d.State, "reason", d.Reason)
		case d.State != launcher.StateUnspecified:
			klog.InfoS("The VM's start was stopped", "state", d.State, "reason", d.Reason, "message", d.Message)
		}
		return signals.ExitStopped
	}
	l := srv.Launcher()
	// Setup is over: keep only what stopping the VM needs (docs/deploy.md).
	if err := dropcaps.Launcher(qemuID, dropcaps.Keep...); err != nil {
		klog.ErrorS(err, "Dropping the launcher's capabilities; killing the VM")
		_, _ = l.Kill(ctx)
		return 1
	}
	// Setup is over: give back what only it used (launcher/memtrim).
	if r, err := memtrim.Release(); err != nil {
		klog.ErrorS(err, "Releasing the setup's memory")
	} else {
		klog.V(2).InfoS("Released the setup's memory", "executableBytes", r.FileBytes, "mappings", len(r.Mappings))
	}
	r := signals.Run(ctx, serverVM{Launcher: l, srv: srv}, signals.Options{
		Signals: sigs,
		Grace:   srv.Grace,
		ShuttingDown: func(sig os.Signal, _ string, grace time.Duration) {
			klog.InfoS("Signal: shutting the VM down", "signal", sig, "grace", grace)
			l.Signaled(signalName(sig))
		},
		ShutdownFailed: func(err error) { klog.ErrorS(err, "Shutdown") },
		Killing:        func(sig os.Signal) { klog.InfoS("Second signal: killing QEMU", "signal", sig) },
	})
	d := r.Domain
	exit := exitStatus(r, srv.StopRequested())
	klog.InfoS("VM ended", "state", d.State, "reason", d.Reason, "message", d.Message, "stopSignal", d.StopSignal, "exit", exit)
	return exit
}

// exitStatus is kemu-launcher's exit status once the VM ended: the stop
// loop's, except that a guest powered off because of a signal alone (the
// kubelet stopped the container: a failed livenessProbe, an eviction; the
// node agent asked nothing, as it does for a deletion) is the host's stop,
// ExitStopped, so that its Pod fails as the VMI does (docs/launcher.md).
func exitStatus(r signals.Result, stopRequested bool) int {
	if r.Exit == signals.ExitPoweredOff && r.Domain.StopSignal != "" && !stopRequested {
		return signals.ExitStopped
	}
	return r.Exit
}

// signalName is sig as the domain's StopSignal names it.
func signalName(sig os.Signal) string {
	switch sig {
	case syscall.SIGTERM:
		return "SIGTERM"
	case os.Interrupt:
		return "SIGINT"
	}
	return sig.String()
}

// serverVM is the VM as the stop loop drives it: its graceful shutdown goes
// through the command server, shared with the Shutdown RPC.
type serverVM struct {
	*launcher.Launcher
	srv *cmdserver.Server
}

func (v serverVM) Shutdown(ctx context.Context, grace time.Duration) (launcher.Domain, error) {
	return v.srv.ShutdownVM(ctx, grace)
}
