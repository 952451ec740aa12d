// Package launcher runs one VM: it turns a validated VMI into a QEMU command
// line, prepares its volumes, starts and supervises QEMU, and drives its
// life over QMP (pause, unpause, ACPI shutdown, kill, reset, guest agent,
// stats). It is what KubeVirt delegates to libvirt; the command server
// (gRPC, launcher pod) and `kemuctl run` (no cluster) both sit on it.
package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/api/validation"
	"github.com/kemu-dev/kemu/devices/cgroup"
	"github.com/kemu-dev/kemu/devices/kvm"
	"github.com/kemu-dev/kemu/devices/selinux"
	"github.com/kemu-dev/kemu/launcher/cmdline"
	"github.com/kemu-dev/kemu/launcher/images"
	"github.com/kemu-dev/kemu/launcher/storage"
	"github.com/kemu-dev/kemu/launcher/unpriv"
	"github.com/kemu-dev/kemu/netsetup"
	"github.com/kemu-dev/kemu/qmp"
	goselinux "github.com/opencontainers/selinux/go-selinux"
)

// Timeouts of the launcher's own steps (not of the guest).
const (
	qmpConnectTimeout = 10 * time.Second
	// PowerdownInterval is how often the ACPI power button is pressed again
	// during a graceful shutdown.
	PowerdownInterval = 5 * time.Second
	// quitGrace is how long QEMU gets to exit after quit before SIGKILL.
	quitGrace = 5 * time.Second
)

// Config says what to run and where.
type Config struct {
	// VMI is the machine to run; New defaults and validates a copy.
	VMI *v1.VirtualMachineInstance
	// Dir is the VM's private runtime directory (sockets, overlays, ISOs).
	// It is created, and removed when the VM ends.
	Dir string
	// ImageCache is where container images' files are cached.
	ImageCache string
	// BaseDir resolves relative image paths (oci:PATH); default: the cwd.
	BaseDir string
	// PVCRoot and SecretsDir locate persistentVolumeClaim and cloud-init
	// secret volumes.
	PVCRoot, SecretsDir string
	// ContainerDiskDir holds containerDisks copied out of their images by
	// the Pod's init containers (<dir>/<volume>/<file>); "" = the launcher
	// pulls them into ImageCache itself.
	ContainerDiskDir string
	// KernelBootDir holds the kernel and initrd of firmware.kernelBoot
	// copied out of their image by the Pod's init container; "" = pull.
	KernelBootDir string
	// QEMU is the emulator binary (default qemu-system-x86_64).
	QEMU string
	// Accel forces "kvm" or "tcg"; "" decides by KVMProbe.
	Accel string
	// KVMProbe configures the probe used when Accel is "".
	KVMProbe kvm.Options
	// NICs are the guest's network interfaces (from the network setup, or
	// user networking in standalone mode). ExtraFiles are handed to QEMU as
	// fds 3, 4, … (tap fds).
	NICs       []cmdline.NIC
	ExtraFiles []*os.File
	// Hooks run after QEMU started (paused) and before it is resumed.
	Hooks []func(ctx context.Context, m *qmp.Monitor) error
	// ConsoleLogSize bounds the serial console log (default 1 MiB).
	ConsoleLogSize int64
	// PodNetwork, when set, wires the VMI's pod-network interfaces in that
	// network namespace with netsetup (taps, bridge, nftables, DHCP) and
	// hands QEMU the tap fds; NICs must then be empty. Everything it made is
	// removed when the VM ends.
	PodNetwork *netsetup.Options
	// NoDeviceCgroup runs QEMU without its cgroup v2 device allowlist. Only
	// for hosts without cgroup2 (or without the rights to use it); by
	// default a missing cgroup2 hierarchy is an error.
	NoDeviceCgroup bool
}

// Launcher supervises one QEMU.
type Launcher struct {
	cfg   Config
	vmi   *v1.VirtualMachineInstance
	state *domainState

	prepared *storage.Prepared
	paths    cmdline.Paths
	argv     []string
	nics     []cmdline.NIC
	files    []*os.File // handed to QEMU as fds 3, 4, …

	net       *netsetup.Result
	netCancel context.CancelFunc

	cmd      *exec.Cmd
	cgroup   *cgroup.Group
	label    selinux.Label
	exited   chan struct{}
	exitErr  error
	stderr   *tailBuffer
	mon      *qmp.Monitor
	events   *qmp.Subscription
	con      *console
	cleanup  sync.Once
	finished chan struct{}

	mu            sync.Mutex
	guestShutdown bool // SHUTDOWN with guest=true seen
	hostRequested bool // quit or kill sent by us
	pauseAsked    bool
	agent         *qmp.Agent

	// Phases records how long each start step took.
	Phases []Phase
}

// Phase is one timed step of Start.
type Phase struct {
	Name string
	Took time.Duration
}

// New checks the VMI (defaulting and validating a copy) and the config.
// Nothing is created yet.
func New(cfg Config) (*Launcher, error) {
	if cfg.VMI == nil {
		return nil, errors.New("launcher: no VMI")
	}
	vmi := cfg.VMI.DeepCopy()
	v1.SetVirtualMachineInstanceDefaults(vmi)
	if errs := validation.ValidateVirtualMachineInstance(vmi); len(errs) > 0 {
		return nil, fmt.Errorf("launcher: invalid VMI %s: %w", vmi.Name, errs.ToAggregate())
	}
	if cfg.Dir == "" {
		return nil, errors.New("launcher: Config.Dir is empty")
	}
	if cfg.QEMU == "" {
		cfg.QEMU = "qemu-system-x86_64"
	}
	if cfg.Accel != "" && cfg.Accel != "kvm" && cfg.Accel != "tcg" {
		return nil, fmt.Errorf("launcher: accelerator %q is not kvm or tcg", cfg.Accel)
	}
	if cfg.ConsoleLogSize <= 0 {
		cfg.ConsoleLogSize = DefaultConsoleLogSize
	}
	if cfg.PodNetwork != nil && len(cfg.NICs) > 0 {
		return nil, errors.New("launcher: Config.NICs and Config.PodNetwork are exclusive")
	}
	return &Launcher{cfg: cfg, vmi: vmi, exited: make(chan struct{}), finished: make(chan struct{}),
		stderr: newTailBuffer(40)}, nil
}

// VMI returns the defaulted VMI being run.
func (l *Launcher) VMI() *v1.VirtualMachineInstance { return l.vmi }

// Domain returns the current state.
func (l *Launcher) Domain() Domain {
	if l.state == nil {
		return Domain{State: StateStarting}
	}
	return l.state.get()
}

// Watch follows domain changes; from the beginning if fromStart.
func (l *Launcher) Watch(fromStart bool) *Watcher {
	w := &Watcher{s: l.state}
	if !fromStart {
		w.next = l.state.get().Seq + 1
	}
	return w
}

// Argv returns QEMU's command line (after Start).
func (l *Launcher) Argv() []string { return append([]string{l.cfg.QEMU}, l.argv...) }

// Monitor returns the launcher's QMP connection (after Start).
func (l *Launcher) Monitor() *qmp.Monitor { return l.mon }

// DebugQMPSocket is the second QMP socket, free for a debugging client.
func (l *Launcher) DebugQMPSocket() string { return l.paths.QMPDebug }

// Start prepares everything, starts QEMU paused, connects QMP, runs the
// hooks and resumes the guest (unless startStrategy is Paused). On any
// error nothing is left behind: no QEMU, overlay, ISO, socket or directory.
func (l *Launcher) Start(ctx context.Context) (err error) {
	accel := l.cfg.Accel
	l.state = newDomainState(accel)
	defer func() {
		if err != nil {
			l.state.set(func(d *Domain) { d.State, d.Reason, d.Message = StateShutoff, ReasonFailedToStart, err.Error() })
			l.kill()
			l.finish()
		}
	}()
	phase := func(name string, t0 time.Time) { l.Phases = append(l.Phases, Phase{name, time.Since(t0)}) }

	t0 := time.Now()
	if err := os.MkdirAll(l.cfg.Dir, 0o700); err != nil {
		return fmt.Errorf("launcher: runtime directory: %w", err)
	}
	if accel == "" {
		probe := l.cfg.KVMProbe
		if probe.QEMU == "" {
			probe.QEMU = l.cfg.QEMU
		}
		v := kvm.Probe(ctx, probe)
		accel = "tcg"
		if v.Usable {
			accel = "kvm"
		}
		klog.InfoS("Accelerator chosen", "accel", accel, "kvmProbe", v.Reason, "cached", v.Cached)
		l.state.set(func(d *Domain) { d.Accel = accel })
	}
	store, err := images.NewStore(l.cfg.ImageCache, l.cfg.BaseDir)
	if err != nil {
		return fmt.Errorf("launcher: image cache: %w", err)
	}
	l.prepared, err = storage.Prepare(ctx, l.vmi, storage.Options{
		Dir: l.cfg.Dir, Images: store, PVCRoot: l.cfg.PVCRoot, SecretsDir: l.cfg.SecretsDir,
		ContainerDiskDir: l.cfg.ContainerDiskDir, KernelBootDir: l.cfg.KernelBootDir})
	if err != nil {
		return fmt.Errorf("launcher: preparing volumes: %w", err)
	}
	l.paths = cmdline.Paths{
		QMP:        filepath.Join(l.cfg.Dir, "qmp.sock"),
		QMPDebug:   filepath.Join(l.cfg.Dir, "qmp-debug.sock"),
		Serial:     filepath.Join(l.cfg.Dir, "serial.sock"),
		GuestAgent: filepath.Join(l.cfg.Dir, "qga.sock"),
	}
	facts := cmdline.Facts{Binary: l.cfg.QEMU, Accel: accel, OVMF: cmdline.FindOVMF()}
	if _, err := os.Stat("/dev/vhost-net"); err == nil {
		facts.VhostNet = true
	}
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
	in := cmdline.Input{VMI: l.vmi, Facts: facts, Paths: l.paths, NICs: l.nics,
		Drives: map[string]cmdline.Drive{}}
	for name, v := range l.prepared.Volumes {
		in.Drives[name] = cmdline.Drive{Path: v.Path, Format: v.Format, ReadOnly: v.ReadOnly, Block: v.Block}
	}
	if k := l.prepared.Kernel; k != nil {
		in.Kernel = &cmdline.KernelBoot{Kernel: k.Kernel, Initrd: k.Initrd}
	}
	if l.argv, err = cmdline.Build(in); err != nil {
		return fmt.Errorf("launcher: QEMU command line: %w", err)
	}
	if err := l.labelFiles(); err != nil {
		return err
	}
	phase("prepare", t0)

	t0 = time.Now()
	if err := l.exec(accel, facts.VhostNet); err != nil {
		return err
	}
	phase("exec", t0)

	t0 = time.Now()
	cctx, cancel := context.WithTimeout(ctx, qmpConnectTimeout)
	defer cancel()
	l.mon, err = l.dialQMP(cctx)
	if err != nil {
		return err
	}
	l.events = l.mon.Subscribe(qmp.SinceConnect(), qmp.WithBuffer(1024))
	phase("qmp-connect", t0)

	if l.vmi.Spec.Domain.Devices.AutoattachSerialConsole == nil || *l.vmi.Spec.Domain.Devices.AutoattachSerialConsole {
		if l.con, err = startConsole(cctx, l.paths.Serial, filepath.Join(l.cfg.Dir, "console.log"), l.cfg.ConsoleLogSize); err != nil {
			return fmt.Errorf("launcher: serial console: %w", err)
		}
	}
	for i, h := range l.cfg.Hooks {
		if err := h(ctx, l.mon); err != nil {
			return fmt.Errorf("launcher: pre-start hook %d: %w", i, err)
		}
	}
	go l.followEvents()
	go l.supervise()

	t0 = time.Now()
	if s := l.vmi.Spec.StartStrategy; s != nil && *s == v1.StartStrategyPaused {
		l.state.set(func(d *Domain) { d.State, d.Reason = StatePaused, ReasonStartPaused })
	} else {
		if err := l.mon.Cont(ctx); err != nil {
			return fmt.Errorf("launcher: resuming the guest: %w", err)
		}
		l.state.set(func(d *Domain) { d.State, d.Reason = StateRunning, ReasonBooted })
	}
	phase("cont", t0)
	return nil
}

// exec starts QEMU in its own process group from a goroutine locked to its
// OS thread for QEMU's whole life: PR_SET_PDEATHSIG fires when the thread
// that forked dies, so the thread must outlive QEMU, and the launcher dying
// takes QEMU with it.
func (l *Launcher) exec(accel string, vhostNet bool) error {
	id, err := l.qemuIdentity(accel, vhostNet)
	if err != nil {
		return err
	}
	if err := l.grantQEMU(id); err != nil {
		return err
	}
	// QEMU's sockets: group-only (the runtime directory is root:QEMU 0770;
	// the launcher reaches them as a member of QEMU's group, see
	// dropcaps.Launcher).
	cmd, err := unpriv.Command(unpriv.Spec{Identity: id, Umask: 0o007, SELinuxLabel: l.label.Process}, l.cfg.QEMU, l.argv...)
	if err != nil {
		return fmt.Errorf("launcher: starting %s: %w", l.cfg.QEMU, err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if !l.cfg.NoDeviceCgroup {
		// QEMU is cloned straight into its device cgroup (CLONE_INTO_CGROUP):
		// it never runs an instruction outside the allowlist.
		fd, err := l.deviceCgroup(accel, vhostNet)
		if err != nil {
			return err
		}
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
	}
	cmd.Stdout = l.stderr
	cmd.Stderr = l.stderr
	cmd.ExtraFiles = l.files
	cmd.Dir = l.cfg.Dir
	started := make(chan error, 1)
	go func() {
		// The thread that forks must outlive QEMU: its death is QEMU's
		// parent-death signal. The helper sets QEMU's SELinux label itself.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		l.cmd = cmd
		started <- nil
		l.exitErr = cmd.Wait()
		close(l.exited)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("launcher: starting %s: %w", l.cfg.QEMU, err)
	}
	l.state.set(func(d *Domain) {
		d.PID, d.SELinuxContext = cmd.Process.Pid, l.label.Process
		if l.cgroup != nil {
			d.DeviceCgroup = l.cgroup.Path()
		}
	})
	klog.InfoS("QEMU started", "pid", cmd.Process.Pid, "uid", id.UID, "gid", id.GID, "vmi", klog.KObj(l.vmi))
	return nil
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
		for _, f := range ir.TapFDs {
			nic.TapFDs = append(nic.TapFDs, 3+len(l.files))
			l.files = append(l.files, f)
		}
		l.nics = append(l.nics, nic)
	}
	l.state.set(func(d *Domain) { d.Interfaces = interfacesOf(res) })
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

// labelFiles chooses the VM's SELinux labels (selinux.ForVM: the pod's own
// category pair in a pod, a fresh sVirt pair standalone) and labels the
// VM's runtime directory with them. A no-op, logged once, when SELinux is
// disabled.
func (l *Launcher) labelFiles() error {
	if !selinux.Enabled() {
		return l.label.LabelTree(l.cfg.Dir) // logs that SELinux is off
	}
	own, err := goselinux.CurrentLabel()
	if err != nil {
		return fmt.Errorf("launcher: reading the launcher's SELinux label: %w", err)
	}
	if l.label, err = selinux.ForVM(selinux.DefaultConfig(), own, selinux.RunningLabels()); err != nil {
		return fmt.Errorf("launcher: choosing the VM's SELinux labels: %w", err)
	}
	if err := l.label.LabelTree(l.cfg.Dir); err != nil {
		return fmt.Errorf("launcher: labelling the VM's files: %w", err)
	}
	klog.InfoS("SELinux labels", "process", l.label.Process, "file", l.label.File)
	return nil
}

// deviceCgroup creates QEMU's cgroup with the devices its VMI needs: the
// basics, /dev/kvm under KVM, /dev/net/tun and /dev/vhost-net for taps,
// and the block devices of block-mode volumes. It returns the group's fd.
func (l *Launcher) deviceCgroup(accel string, vhostNet bool) (int, error) {
	var blocks []string
	for _, v := range l.prepared.Volumes {
		if v.Block {
			blocks = append(blocks, v.Path)
		}
	}
	taps := false
	for _, n := range l.nics {
		taps = taps || len(n.TapFDs) > 0
	}
	allow, err := cgroup.Default(accel == "kvm", taps, vhostNet && taps, blocks...)
	if err != nil {
		return 0, fmt.Errorf("launcher: device allowlist: %w", err)
	}
	if os.Getpid() == 1 {
		// The launcher is its container's init: its mount namespace is the
		// container's own, where a cgroup2 mount of its own is private. An
		// unprivileged container on a hybrid host has none, on a cgroup v2
		// host a read-only one (docs/deploy.md); the mount shows only the
		// container's own cgroup subtree.
		if ok, err := cgroup.MountOwn("/run/kemu-cgroup2"); err != nil {
			return 0, fmt.Errorf("launcher: QEMU's device cgroup (run without it only with the explicit opt-out): %w", err)
		} else if ok {
			klog.InfoS("Mounted the container's cgroup2 subtree in the launcher's mount namespace", "path", "/run/kemu-cgroup2")
		}
	}
	removeStaleDeviceCgroups()
	// The VMI's host name (at most 63 bytes) keeps the name within a file
	// name's 255 bytes for a VMI name of any length.
	name := fmt.Sprintf("%s%s-%s-%d-%d", deviceCgroupPrefix, l.vmi.Namespace, v1.DeriveHostname(l.vmi.Name), os.Getpid(), cgroupSeq.Add(1))
	if l.cgroup, err = cgroup.Create("", name, allow); err != nil {
		return 0, fmt.Errorf("launcher: QEMU's device cgroup (run without it only with the explicit opt-out): %w", err)
	}
	fd, err := l.cgroup.FD()
	if err != nil {
		return 0, fmt.Errorf("launcher: QEMU's device cgroup: %w", err)
	}
	klog.V(2).InfoS("QEMU device allowlist", "cgroup", l.cgroup.Path(), "allow", allow.Strings())
	return fd, nil
}

// cgroupSeq keeps the names of device cgroups made by one process apart.
var cgroupSeq atomic.Uint64

// deviceCgroupPrefix starts the name of every QEMU device cgroup; the name
// ends in -<launcher pid>-<n>.
const deviceCgroupPrefix = "kemu-qemu-"

// removeStaleDeviceCgroups removes the empty device cgroups that launchers
// killed without a chance to clean up (SIGKILL) left beside this one.
func removeStaleDeviceCgroups() {
	h, err := cgroup.Self()
	if err != nil {
		return
	}
	entries, err := os.ReadDir(h.Dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || !strings.HasPrefix(name, deviceCgroupPrefix) {
			continue
		}
		parts := strings.Split(name, "-")
		if len(parts) < 2 {
			continue
		}
		pid, err := strconv.Atoi(parts[len(parts)-2])
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue
		}
		// rmdir fails on a cgroup that still has processes: nothing is killed.
		if err := os.Remove(filepath.Join(h.Dir, name)); err == nil {
			klog.InfoS("Removed a stale QEMU device cgroup", "cgroup", name)
		}
	}
}

// DeviceCgroup is the cgroup confining QEMU's devices, or "" when the
// launcher runs without it (Config.NoDeviceCgroup).
func (l *Launcher) DeviceCgroup() string {
	if l.cgroup == nil {
		return ""
	}
	return l.cgroup.Path()
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
		select {
		case <-l.exited:
			out := l.stderr.String()
			return nil, fmt.Errorf("launcher: QEMU exited at start (%v): %s%s", l.exitErr, out, permissionHint(out))
		default:
		}
		return nil, fmt.Errorf("launcher: QMP: %w", err)
	}
	return m, nil
}

// followEvents turns QMP events into domain states.
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
			l.state.set(func(d *Domain) {
				switch d.State {
				case StateStarting:
					d.State, d.Reason = StateRunning, ReasonBooted
				case StatePaused, StateMigrating:
					d.State, d.Reason, d.Message = StateRunning, ReasonUnpaused, ""
				}
			})
		case "POWERDOWN":
			l.state.set(func(d *Domain) { d.State, d.Reason = StateShuttingDown, ReasonACPI })
		case "SHUTDOWN":
			guest := ev.String("guest") == "true"
			l.mu.Lock()
			if guest {
				l.guestShutdown = true
			}
			l.mu.Unlock()
			reason := ReasonHostRequest
			if guest {
				reason = ReasonGuestShutdown
			}
			l.state.set(func(d *Domain) { d.State, d.Reason, d.Message = StateShuttingDown, reason, ev.String("reason") })
		case "GUEST_PANICKED":
			l.state.set(func(d *Domain) { d.Reason, d.Message = ReasonGuestPanicked, ev.String("action") })
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
	l.mu.Lock()
	asked := l.pauseAsked
	l.mu.Unlock()
	l.state.set(func(d *Domain) {
		if d.State == StateShuttingDown || d.State == StateShutoff {
			return
		}
		switch {
		case st.Running:
			d.State, d.Reason = StateRunning, ReasonUnpaused
		case st.Status == "shutdown":
			d.State = StateShuttingDown
		default:
			d.State, d.Reason, d.Message = StatePaused, pauseReason(st.Status, asked), ""
		}
	})
}

// supervise waits for QEMU to exit and records how it ended.
func (l *Launcher) supervise() {
	<-l.exited
	code := -1
	var ee *exec.ExitError
	switch {
	case l.exitErr == nil:
		code = 0
	case errors.As(l.exitErr, &ee):
		code = ee.ExitCode()
	}
	l.mu.Lock()
	reason := exitReason(l.guestShutdown, l.hostRequested, code)
	l.mu.Unlock()
	msg := fmt.Sprintf("QEMU exited with status %d", code)
	if code == -1 {
		msg = fmt.Sprintf("QEMU ended: %v", l.exitErr)
	}
	if reason == ReasonCrashed {
		if tail := l.stderr.String(); tail != "" {
			msg += ": " + tail
		}
	}
	l.finish()
	l.state.set(func(d *Domain) {
		d.State, d.Reason, d.Message, d.ExitCode, d.PID, d.AgentConnected = StateShutoff, reason, msg, &code, 0, false
	})
	klog.InfoS("VM ended", "vmi", klog.KObj(l.vmi), "reason", reason, "message", msg)
}

// finish releases everything the VM had: connections, overlays, ISOs,
// sockets, the runtime directory. Idempotent.
func (l *Launcher) finish() {
	l.cleanup.Do(func() {
		l.mu.Lock()
		if l.agent != nil {
			l.agent.Close()
		}
		l.mu.Unlock()
		if l.mon != nil {
			l.mon.Close()
		}
		if l.con != nil {
			l.con.close()
		}
		if l.net != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := l.net.Teardown(ctx); err != nil {
				klog.ErrorS(err, "Removing the VM's pod network wiring")
			}
			cancel()
		}
		if l.netCancel != nil {
			l.netCancel()
		}
		if l.prepared != nil {
			if err := l.prepared.Cleanup(); err != nil {
				klog.ErrorS(err, "Removing the VM's volumes")
			}
		}
		if l.cgroup != nil {
			// QEMU has exited; anything left in its cgroup (a process it
			// spawned outside its process group) must not outlive it.
			if procs, err := l.cgroup.Procs(); err == nil && len(procs) > 0 {
				klog.InfoS("Killing processes left in QEMU's cgroup", "cgroup", l.cgroup.Path(), "pids", procs)
				if err := l.cgroup.Kill(); err != nil {
					klog.ErrorS(err, "Killing QEMU's cgroup")
				}
			}
			if err := l.cgroup.Remove(); err != nil {
				klog.ErrorS(err, "Removing QEMU's device cgroup", "cgroup", l.cgroup.Path())
			}
		}
		if err := os.RemoveAll(l.cfg.Dir); err != nil {
			klog.ErrorS(err, "Removing the runtime directory", "dir", l.cfg.Dir)
		}
		close(l.finished)
	})
}

// Wait blocks until QEMU ended and everything is cleaned up, then returns
// the final state.
func (l *Launcher) Wait(ctx context.Context) (Domain, error) {
	select {
	case <-l.finished:
		if l.cmd != nil {
			<-l.exited
		}
		// supervise records Shutoff right after finish.
		return l.Watch(true).WaitFor(ctx, InState(StateShutoff))
	case <-ctx.Done():
		return l.Domain(), ctx.Err()
	}
}

// Pause stops the guest's CPUs.
func (l *Launcher) Pause(ctx context.Context) error {
	l.mu.Lock()
	l.pauseAsked = true
	l.mu.Unlock()
	w := l.Watch(false)
	if err := l.mon.Stop(ctx); err != nil {
		return err
	}
	_, err := w.WaitFor(ctx, InState(StatePaused, StateShutoff))
	return err
}

// Unpause resumes the guest's CPUs.
func (l *Launcher) Unpause(ctx context.Context) error {
	l.mu.Lock()
	l.pauseAsked = false
	l.mu.Unlock()
	w := l.Watch(false)
	if err := l.mon.Cont(ctx); err != nil {
		return err
	}
	_, err := w.WaitFor(ctx, InState(StateRunning, StateShutoff))
	return err
}

// Reset resets the machine.
func (l *Launcher) Reset(ctx context.Context) error { return l.mon.SystemReset(ctx) }

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

// errNoAgent: the guest agent is not connected.
var errNoAgent = errors.New("launcher: the guest agent is not connected")

// agentShutdownTimeout bounds a guest-shutdown through the agent (its
// synchronisation, and the wait for a refusal).
const agentShutdownTimeout = 5 * time.Second

// agentShutdown asks the guest through its agent, if it is connected.
func (l *Launcher) agentShutdown(ctx context.Context, mode qmp.ShutdownMode) error {
	l.mu.Lock()
	a := l.agent
	l.mu.Unlock()
	if a == nil || !l.Domain().AgentConnected {
		return errNoAgent
	}
	select {
	case <-a.Done():
		return errNoAgent
	default:
	}
	ctx, cancel := context.WithTimeout(ctx, agentShutdownTimeout)
	defer cancel()
	return a.Shutdown(ctx, mode)
}

func (l *Launcher) pressPowerButton(ctx context.Context) {
	if err := l.mon.SystemPowerdown(ctx); err != nil && !errors.Is(err, qmp.ErrClosed) {
		klog.ErrorS(err, "ACPI power button")
	}
}

// Stop asks QEMU to quit at once (no guest shutdown) and kills it if it
// has not exited within 5 s.
func (l *Launcher) Stop(ctx context.Context) (Domain, error) {
	l.mu.Lock()
	l.hostRequested = true
	l.mu.Unlock()
	qctx, cancel := context.WithTimeout(ctx, quitGrace)
	defer cancel()
	if l.mon != nil {
		if err := l.mon.Quit(qctx); err != nil {
			klog.ErrorS(err, "QMP quit")
		}
	}
	select {
	case <-l.exited:
	case <-qctx.Done():
		l.kill()
	}
	return l.Wait(ctx)
}

// Kill ends QEMU with SIGKILL and waits for the cleanup.
func (l *Launcher) Kill(ctx context.Context) (Domain, error) {
	l.kill()
	return l.Wait(ctx)
}

func (l *Launcher) kill() {
	if l.cmd == nil || l.cmd.Process == nil {
		return
	}
	select {
	case <-l.exited:
		return
	default:
	}
	l.mu.Lock()
	l.hostRequested = true
	l.mu.Unlock()
	_ = syscall.Kill(-l.cmd.Process.Pid, syscall.SIGKILL)
	<-l.exited
}

// Console attaches to the serial console: the guest's output from now on
// and a writer to its input.
func (l *Launcher) Console() (<-chan []byte, io.Writer, func(), error) {
	if l.con == nil {
		return nil, nil, nil, errors.New("launcher: the VMI has no serial console (autoattachSerialConsole: false)")
	}
	out, in, detach := l.con.Attach()
	return out, in, detach, nil
}

// ConsoleLog is the path of the bounded serial console log.
func (l *Launcher) ConsoleLog() string { return filepath.Join(l.cfg.Dir, "console.log") }

// dropAgent forgets the guest agent connection: the next Agent call dials
// and resynchronises again, and the domain says it is not connected.
func (l *Launcher) dropAgent() {
	l.mu.Lock()
	a := l.agent
	l.agent = nil
	l.mu.Unlock()
	if a != nil {
		a.Close()
	}
	l.state.set(func(d *Domain) { d.AgentConnected = false })
}

// Agent returns a connection to the guest agent, connecting (and
// synchronising) if needed. AgentConnected follows the outcome.
func (l *Launcher) Agent(ctx context.Context) (*qmp.Agent, error) {
	l.mu.Lock()
	a := l.agent
	l.mu.Unlock()
	if a != nil {
		select {
		case <-a.Done():
		default:
			return a, nil
		}
	}
	a, err := qmp.DialAgent(ctx, l.paths.GuestAgent)
	l.state.set(func(d *Domain) { d.AgentConnected = err == nil })
	if err != nil {
		return nil, fmt.Errorf("launcher: guest agent: %w", err)
	}
	l.mu.Lock()
	l.agent = a
	l.mu.Unlock()
	return a, nil
}

// GuestPing checks that the guest agent answers.
func (l *Launcher) GuestPing(ctx context.Context) error {
	a, err := l.Agent(ctx)
	if err == nil {
		err = a.Ping(ctx)
	}
	l.state.set(func(d *Domain) { d.AgentConnected = err == nil })
	return err
}

// Stats are the VM's counters.
type Stats struct {
	VCPUs   []qmp.CPUInfoFast
	Blocks  []qmp.BlockStats
	Balloon *qmp.BalloonInfo
	// CPU is the CPU time QEMU's device cgroup used (all its threads), 0
	// without the cgroup; RSS is QEMU's resident memory.
	CPU time.Duration
	RSS uint64
}

// Stats reads CPU, block and balloon figures over QMP, QEMU's CPU time
// from its cgroup and its resident memory from /proc.
func (l *Launcher) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	var err error
	if l.cgroup != nil {
		m, err := l.cgroup.Stats()
		if err != nil {
			return s, err
		}
		if m.CPU != nil {
			s.CPU = time.Duration(m.CPU.UsageUsec) * time.Microsecond
		}
	}
	if pid := l.Domain().PID; pid > 0 {
		s.RSS = residentBytes(pid)
	}
	if s.VCPUs, err = l.mon.QueryCPUsFast(ctx); err != nil {
		return s, err
	}
	if s.Blocks, err = l.mon.QueryBlockstats(ctx); err != nil {
		return s, err
	}
	if b, err := l.mon.QueryBalloon(ctx); err == nil {
		s.Balloon = &b
	}
	return s, nil
}

// residentBytes is the resident set size of process pid (0 if unknown).
func residentBytes(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * uint64(os.Getpagesize())
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

// tailBuffer keeps the last lines QEMU wrote to stdout/stderr.
type tailBuffer struct {
	mu    sync.Mutex
	max   int
	lines []string
	part  string
}

func newTailBuffer(max int) *tailBuffer { return &tailBuffer{max: max} }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.part + string(p)
	parts := strings.Split(s, "\n")
	t.part = parts[len(parts)-1]
	for _, line := range parts[:len(parts)-1] {
		if line = strings.TrimSpace(line); line != "" {
			klog.InfoS("QEMU", "output", line)
			t.lines = append(t.lines, line)
		}
	}
	if len(t.lines) > t.max {
		t.lines = t.lines[len(t.lines)-t.max:]
	}
	return len(p), nil
}

// String returns the last few lines, joined.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := t.lines
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	if t.part != "" {
		lines = append(lines, t.part)
	}
	return strings.Join(lines, " | ")
}
