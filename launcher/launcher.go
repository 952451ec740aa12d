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
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/api/validation"
	"github.com/kemu-dev/kemu/devices/cgroup"
	"github.com/kemu-dev/kemu/devices/kvm"
	"github.com/kemu-dev/kemu/devices/selinux"
	"github.com/kemu-dev/kemu/launcher/cmdline"
	"github.com/kemu-dev/kemu/launcher/storage"
	"github.com/kemu-dev/kemu/netsetup"
	"github.com/kemu-dev/kemu/qmp"
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
	// ConfigDir holds the config volumes the launcher Pod mounts
	// (<ConfigDir>/<volume>/); "" when there are none (kemuctl run).
	ConfigDir string
	// ContainerDiskDir holds containerDisks copied out of their images by
	// the Pod's init containers (<dir>/<volume>/<file>); "" = the launcher
	// pulls them into ImageCache itself.
	ContainerDiskDir string
	// KernelBootDir holds the kernel and initrd of firmware.kernelBoot
	// copied out of their image by the Pod's init container; "" = pull.
	KernelBootDir string
	// ImagesMounted: ContainerDiskDir's and KernelBootDir's images are
	// mounted by the kubelet, not copied (storage.Options.ImagesMounted).
	ImagesMounted bool
	// QEMU is the emulator binary (default qemu-system-x86_64).
	QEMU string
	// Virtiofsd serves domain.devices.filesystems (default
	// DefaultVirtiofsd).
	Virtiofsd string
	// Passt serves passt-bound interfaces (default DefaultPasst).
	Passt string
	// Swtpm emulates domain.devices.tpm (default DefaultSwtpm).
	Swtpm string
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
	// ConsoleCopy, when set, also receives the guest's serial output from
	// the start, as it arrives (kemuctl run --serial-log). It is written by
	// the console's reader: it must not block, and bounds itself.
	ConsoleCopy io.Writer
	// PodNetwork, when set, wires the VMI's pod-network interfaces in that
	// network namespace with netsetup (taps, bridge, nftables, DHCP) and
	// hands QEMU the tap fds; NICs must then be empty. Everything it made is
	// removed when the VM ends.
	PodNetwork *netsetup.Options
	// NodeName is the downward metrics' HostName (the Kubernetes node's
	// name); "": this machine's host name (kemuctl run).
	NodeName string
	// VMStateDir is the VM's backend storage (the launcher Pod's
	// persistent-state-for-<vm> claim, launcherpod.VMStateDir): a
	// persistent TPM keeps swtpm's state in its swtpm/ (tpm.go). "": none,
	// and a VMI with domain.devices.tpm.persistent: true is refused.
	VMStateDir string
	// HugepagesDir is a hugetlbfs mount for spec.domain.memory.hugepages
	// (the launcher Pod's hugepages emptyDir; kemuctl run: /dev/hugepages).
	HugepagesDir string
	// CPUs are the host CPUs dedicatedCpuPlacement pins to; nil: the
	// launcher's own (its cgroup's cpuset and its affinity).
	CPUs []int
	// SysNodeDir is where the host's NUMA nodes are described (default
	// /sys/devices/system/node).
	SysNodeDir string
	// NoDeviceCgroup runs QEMU without its cgroup v2 device allowlist. Only
	// for hosts without cgroup2 (or without the rights to use it); by
	// default a missing cgroup2 hierarchy is an error.
	NoDeviceCgroup bool
}

// Launcher supervises one QEMU. Its life is a sequence of steps, each in
// its own file: prepare (prepare.go), exec (process.go), connect
// (connect.go), resume (runstate.go); Start and StartIncoming compose them.
// The domain's state is written only by the state machine (state.go).
type Launcher struct {
	// accelReason is why the KVM probe chose the accelerator ("" when
	// Config.Accel forced it).
	accelReason string
	cfg         Config
	vmi         *v1.VirtualMachineInstance
	state       *domainState

	// Prepare's results.
	accel    string
	vhostNet bool
	prepared *storage.Prepared
	paths    cmdline.Paths
	argv     []string
	nics     []cmdline.NIC
	files    []*os.File // handed to QEMU as fds 3, 4, …
	// qmpListener is the QMP socket QEMU inherits (among files); the
	// launcher's copy is closed once QEMU has it (closeQMPListener).
	qmpListener *os.File

	place     *placement // placement.go
	net       *netsetup.Result
	netCancel context.CancelFunc
	passt     []*passtProc // passt.go, one per passt-bound interface

	// Exec's: the process, its cgroup and labels.
	cmd      *exec.Cmd
	cgroup   *cgroup.Group
	label    selinux.Label
	exited   chan struct{}
	exitErr  error
	stderr   *tailBuffer
	cleanup  sync.Once
	finished chan struct{}

	// The devices' daemons (daemon.go: virtiofsd, swtpm): started before QEMU,
	// stopped after it. fsStopping: the launcher is stopping them;
	// fsFailure: why one ended the VM; qemuPID: QEMU's, once started.
	fs         []*virtiofsd
	tpm        *swtpm // the TPM's daemon (tpm.go), nil without a TPM
	fsStopping atomic.Bool
	fsFailure  atomic.Pointer[string]
	qemuPID    atomic.Int64

	// Connect's.
	mon    *qmp.Monitor
	events *qmp.Subscription
	con    *console

	mu    sync.Mutex
	agent *qmp.Agent // the guest agent connection, nil until dialled (agent.go)

	migMu  sync.Mutex
	source *sourceMigration // the last outgoing migration (migration_source.go)

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
	if cfg.Virtiofsd == "" {
		cfg.Virtiofsd = DefaultVirtiofsd
	}
	if cfg.Swtpm == "" {
		cfg.Swtpm = DefaultSwtpm
	}
	if v1.HasPersistentTPM(&vmi.Spec) && cfg.VMStateDir == "" {
		return nil, errors.New("launcher: spec.domain.devices.tpm.persistent: no backend storage to keep the TPM's state on (a launcher Pod mounts its VM's persistent-state-for claim; kemuctl run: --vm-state DIR)")
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
		stderr: newTailBuffer(40, "QEMU")}, nil
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

// Start is a normal start: it prepares everything, starts QEMU paused,
// connects QMP, runs the hooks and resumes the guest (unless startStrategy
// is Paused). On any error nothing is left behind: no QEMU, overlay, ISO,
// socket or directory.
func (l *Launcher) Start(ctx context.Context) error { return l.start(ctx, false) }

// StartIncoming starts QEMU to receive an incoming migration: prepared as
// for Start, the same command line plus -incoming defer, QMP connected and
// the hooks run, and left paused (QEMU's run state inmigrate; the domain
// Paused with reason Migration). The migration, not the launcher, resumes
// it. On any error nothing is left behind, as with Start.
func (l *Launcher) StartIncoming(ctx context.Context) error { return l.start(ctx, true) }

// start runs the steps: prepare → exec → connect → verify → resume (a
// normal start only).
func (l *Launcher) start(ctx context.Context, incoming bool) (err error) {
	l.state = newDomainState(l.cfg.Accel)
	defer func() {
		if err != nil {
			if cause := l.filesystemFailure(); cause != "" {
				err = fmt.Errorf("%s: %w", cause, err)
			}
			l.state.handle(event{kind: evStartFailed, message: err.Error()})
			l.kill()
			l.finish()
		}
	}()
	if err := l.timed("prepare", func() error { return l.prepare(ctx, incoming) }); err != nil {
		return err
	}
	if err := l.timed("exec", func() error { return l.exec() }); err != nil {
		return err
	}
	if err := l.connect(ctx); err != nil {
		return err
	}
	if l.place != nil && l.place.vcpuCPUs != nil {
		if err := l.timed("pin", func() error { return l.pin(ctx) }); err != nil {
			return err
		}
	}
	// qemu-img's verdict on the images, which ran while QEMU started,
	// before the guest may run (storage.Prepared.Verify).
	if err := l.timed("verify", func() error { return l.prepared.Verify(ctx) }); err != nil {
		return fmt.Errorf("launcher: preparing volumes: %w", err)
	}
	if incoming {
		l.state.handle(event{kind: evIncoming})
		klog.InfoS("QEMU waits for an incoming migration", "vmi", klog.KObj(l.vmi))
		return nil
	}
	return l.timed("cont", func() error { return l.resume(ctx) })
}

// timed runs one start step and records how long it took.
func (l *Launcher) timed(name string, step func() error) error {
	t0 := time.Now()
	err := step()
	if err == nil {
		l.Phases = append(l.Phases, Phase{name, time.Since(t0)})
	}
	return err
}

// AccelReason says why the accelerator was chosen: the KVM probe's verdict,
// or "" when Config.Accel forced it.
func (l *Launcher) AccelReason() string { return l.accelReason }
