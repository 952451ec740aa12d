package launcher

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/klog/v2"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/devices/kvm"
	"github.com/kemu-dev/kemu/launcher/cmdline"
	"github.com/kemu-dev/kemu/launcher/images"
	"github.com/kemu-dev/kemu/launcher/storage"
	"github.com/kemu-dev/kemu/netsetup"
)

// prepare readies everything QEMU needs before it runs: the accelerator,
// the volumes, QEMU's sockets, the firmware's EFI variables, the pod
// network, the command line (with -incoming defer for a migration target:
// incoming) and the SELinux labels of the VM's files. What
// QEMU's user must own is granted at exec.
func (l *Launcher) prepare(ctx context.Context, incoming bool) error {
	if err := os.MkdirAll(l.cfg.Dir, 0o700); err != nil {
		return fmt.Errorf("launcher: runtime directory: %w", err)
	}
	l.accel = l.chooseAccel(ctx)
	store, err := images.NewStore(l.cfg.ImageCache, l.cfg.BaseDir)
	if err != nil {
		return fmt.Errorf("launcher: image cache: %w", err)
	}
	l.prepared, err = storage.Prepare(ctx, l.vmi, storage.Options{
		Dir: l.cfg.Dir, Images: store, PVCRoot: l.cfg.PVCRoot, SecretsDir: l.cfg.SecretsDir, ConfigDir: l.cfg.ConfigDir,
		ContainerDiskDir: l.cfg.ContainerDiskDir, KernelBootDir: l.cfg.KernelBootDir, ImagesMounted: l.cfg.ImagesMounted})
	if err != nil {
		return fmt.Errorf("launcher: preparing volumes: %w", err)
	}
	l.paths = cmdline.Paths{
		QMP:        filepath.Join(l.cfg.Dir, "qmp.sock"),
		QMPDebug:   filepath.Join(l.cfg.Dir, "qmp-debug.sock"),
		Serial:     filepath.Join(l.cfg.Dir, "serial.sock"),
		GuestAgent: filepath.Join(l.cfg.Dir, "qga.sock"),
		VNC:        filepath.Join(l.cfg.Dir, VNCSocketName),
		Dir:        l.cfg.Dir,
	}
	if l.vmi.Spec.Domain.Devices.DownwardMetrics != nil {
		l.paths.DownwardMetrics = filepath.Join(l.cfg.Dir, DownwardMetricsSocketName)
	}
	facts := cmdline.Facts{Binary: l.cfg.QEMU, Accel: l.accel, OVMF: cmdline.FindOVMF()}
	// The binary says which machine types it has: QEMU versions differ.
	// Not asked (a QEMU start, 14 ms) for q35 or pc, which every QEMU has.
	if !v1.UniversalMachineType(l.vmi.Spec.Domain.Machine.Type) {
		if facts.Machines, err = cmdline.DetectMachines(ctx, l.cfg.QEMU); err != nil {
			return fmt.Errorf("launcher: %w", err)
		}
	}
	// Named CPU models and CPU features are checked against what QEMU
	// offers under the accelerator (one QEMU run with no machine).
	if cpu := l.vmi.Spec.Domain.CPU; cmdline.NeedsCPUFacts(cpu.Model, len(cpu.Features)) {
		if facts.CPU, err = cmdline.DetectCPU(ctx, l.cfg.QEMU, l.accel); err != nil {
			return fmt.Errorf("launcher: %w", err)
		}
	}
	if _, err := os.Stat("/dev/vhost-net"); err == nil {
		facts.VhostNet = true
	}
	l.vhostNet = facts.VhostNet
	if efi := l.vmi.Spec.Domain.Firmware.Bootloader; efi != nil && efi.EFI != nil {
		// Defaulting sets secureBoot (true unless asked otherwise).
		secure := efi.EFI.SecureBoot == nil || *efi.EFI.SecureBoot
		if l.paths.EFIVars, err = l.copyEFIVars(facts.OVMF, secure); err != nil {
			return err
		}
	}
	if err := l.network(); err != nil {
		return err
	}
	// QEMU inherits its QMP socket listening (listenQMP), after the taps.
	l.paths.QMPFD = 3 + len(l.files)
	if l.place, err = l.planPlacement(); err != nil {
		return err
	}
	in := cmdline.Input{VMI: l.vmi, Facts: facts, Paths: l.paths, NICs: l.nics,
		Drives: map[string]cmdline.Drive{}, Incoming: incoming, Now: time.Now(),
		Placement: cmdline.Placement{Hugepages: l.place.hugepagesDir, NUMA: l.place.numa}}
	for name, v := range l.prepared.Volumes {
		in.Drives[name] = cmdline.Drive{Path: v.Path, Format: v.Format, ReadOnly: v.ReadOnly, Block: v.Block,
			DirectIO: v.DirectIO, Preallocated: v.Preallocated}
	}
	if k := l.prepared.Kernel; k != nil {
		in.Kernel = &cmdline.KernelBoot{Kernel: k.Kernel, Initrd: k.Initrd}
	}
	if l.argv, err = cmdline.Build(in); err != nil {
		return fmt.Errorf("launcher: QEMU command line: %w", err)
	}
	if err := l.listenQMP(); err != nil {
		return err
	}
	if err := l.listenFilesystems(); err != nil {
		return err
	}
	if err := l.listenTPM(); err != nil {
		return err
	}
	return l.labelFiles()
}

// listenQMP makes QEMU's monitor socket at Paths.QMP, listening, for QEMU
// to inherit at Paths.QMPFD: the launcher connects the moment QEMU is
// started (the connection waits in the socket's backlog until QEMU's main
// loop accepts it and greets), instead of polling for QEMU to create the
// path. Only the launcher connects: the file is root's, 0600.
func (l *Launcher) listenQMP() error {
	if err := os.Remove(l.paths.QMP); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("launcher: QMP socket: %w", err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: l.paths.QMP, Net: "unix"})
	if err != nil {
		return fmt.Errorf("launcher: QMP socket: %w", err)
	}
	ln.SetUnlinkOnClose(false)
	f, err := ln.File() // a duplicate, still listening after ln closes
	ln.Close()
	if err == nil {
		err = os.Chmod(l.paths.QMP, 0o600)
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		return fmt.Errorf("launcher: QMP socket: %w", err)
	}
	if want := 3 + len(l.files); want != l.paths.QMPFD {
		f.Close()
		return fmt.Errorf("launcher: QMP socket: fd %d in QEMU's command line, but it would be fd %d", l.paths.QMPFD, want)
	}
	l.qmpListener = f
	l.files = append(l.files, f)
	return nil
}

// closeQMPListener closes the launcher's copy of QEMU's QMP socket once
// QEMU has its own (or will never start).
func (l *Launcher) closeQMPListener() {
	if l.qmpListener != nil {
		l.qmpListener.Close()
		l.qmpListener = nil
	}
}

// chooseAccel is Config.Accel, or kvm if the KVM probe booted a guest
// under KVM, else tcg.
func (l *Launcher) chooseAccel(ctx context.Context) string {
	if l.cfg.Accel != "" {
		return l.cfg.Accel
	}
	probe := l.cfg.KVMProbe
	if probe.QEMU == "" {
		probe.QEMU = l.cfg.QEMU
	}
	v := kvm.Probe(ctx, probe)
	accel := "tcg"
	if v.Usable {
		accel = "kvm"
	}
	klog.InfoS("Accelerator chosen", "accel", accel, "kvmProbe", v.Reason, "cached", v.Cached)
	l.accelReason = v.Reason
	if v.Cached {
		l.accelReason += " (cached verdict)"
	}
	l.state.handle(event{kind: evAccel, accel: accel})
	return accel
}

// network decides the guest's NICs: the configured ones, or those netsetup
// wires on the pod network (Config.PodNetwork). The DHCP servers live until
// finish tears the network down.
func (l *Launcher) network() error {
	l.nics, l.files = l.cfg.NICs, l.cfg.ExtraFiles
	if l.cfg.PodNetwork == nil {
		return nil
	}
	plan, errs := netsetup.NewPlan(l.vmi, *l.cfg.PodNetwork)
	if len(errs) > 0 {
		return fmt.Errorf("launcher: pod network: %w", errs.ToAggregate())
	}
	var ctx context.Context
	ctx, l.netCancel = context.WithCancel(context.Background())
	res, err := netsetup.Setup(ctx, plan)
	if err != nil {
		return fmt.Errorf("launcher: pod network: %w", err)
	}
	l.net = res
	l.nics = nil
	l.files = append([]*os.File(nil), l.cfg.ExtraFiles...)
	for _, ir := range res.Interfaces {
		nic := cmdline.NIC{Name: ir.Name, MAC: ir.MAC, Model: ir.Model, MTU: ir.MTU}
		if ir.Passt != nil {
			f, err := l.passtSocket(ir.Name, *ir.Passt)
			if err != nil {
				return err
			}
			nic.PasstFD = 3 + len(l.files)
			l.files = append(l.files, f)
		}
		for _, f := range ir.TapFDs {
			nic.TapFDs = append(nic.TapFDs, 3+len(l.files))
			l.files = append(l.files, f)
		}
		l.nics = append(l.nics, nic)
	}
	l.state.handle(event{kind: evNetwork, interfaces: interfacesOf(res)})
	return nil
}

// interfacesOf is what the domain reports of the wired interfaces.
func interfacesOf(res *netsetup.Result) []Interface {
	var out []Interface
	for _, ir := range res.Interfaces {
		out = append(out, Interface{Name: ir.Name, MAC: ir.MAC, IPs: append([]string(nil), ir.IPs...),
			GuestIP: ir.GuestIP, InfoSource: ir.InfoSource, Queues: len(ir.TapFDs)})
	}
	return out
}

// copyEFIVars gives the VM its own writable copy of the OVMF variables.
func (l *Launcher) copyEFIVars(o cmdline.OVMF, secure bool) (string, error) {
	_, src, err := o.Pick(secure)
	if err != nil {
		return "", fmt.Errorf("launcher: spec.domain.firmware.bootloader.efi: %w", err)
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return "", fmt.Errorf("launcher: EFI variables: %w", err)
	}
	dst := filepath.Join(l.cfg.Dir, "efivars.fd")
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		return "", fmt.Errorf("launcher: EFI variables: %w", err)
	}
	return dst, nil
}
