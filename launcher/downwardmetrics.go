package launcher

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/launcher/cmdline"
	"github.com/kemu-dev/kemu/launcher/downwardmetrics"
	"github.com/kemu-dev/kemu/launcher/storage"
)

// DownwardMetricsPeriod is how often the downward metrics disk is
// refreshed: KubeVirt's 5 seconds.
const DownwardMetricsPeriod = 5 * time.Second

// downwardMetricsTimeout bounds one refresh's QMP queries.
const downwardMetricsTimeout = 2 * time.Second

// clockTicks is the unit of /proc/<pid>/task/<tid>/stat's times (USER_HZ).
const clockTicks = 100

// downwardMetricsDisk is the vhostmd disk's path, "" without a
// downwardMetrics volume.
func (l *Launcher) downwardMetricsDisk() string {
	for _, v := range l.prepared.Volumes {
		if v.Kind == storage.KindDownwardMetrics {
			return v.Path
		}
	}
	return ""
}

// refreshDownwardMetrics writes the node's and the VM's figures to the
// vhostmd disk now and every DownwardMetricsPeriod until QEMU exits. Only
// this node's totals and this VM's figures: nothing of other VMs.
func (l *Launcher) refreshDownwardMetrics() {
	path := l.downwardMetricsDisk()
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		klog.ErrorS(err, "Downward metrics not refreshed", "vmi", klog.KObj(l.vmi))
		return
	}
	defer f.Close()
	ctx, cancel := l.untilExit()
	defer cancel()
	host := l.downwardHost(ctx)
	t := time.NewTicker(DownwardMetricsPeriod)
	defer t.Stop()
	failing := false
	for {
		err := l.writeDownwardMetrics(ctx, f, host)
		switch {
		case err != nil && !failing:
			klog.ErrorS(err, "Downward metrics refresh", "vmi", klog.KObj(l.vmi))
		case err == nil && failing:
			klog.InfoS("Downward metrics refreshed again", "vmi", klog.KObj(l.vmi))
		}
		failing = err != nil
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// untilExit is a context cancelled when QEMU exits.
func (l *Launcher) untilExit() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-l.exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// downwardHost is the host side: the node's name (the machine's host
// name standalone) and QEMU's version.
func (l *Launcher) downwardHost(ctx context.Context) downwardmetrics.Host {
	host := downwardmetrics.Host{NodeName: l.cfg.NodeName}
	if host.NodeName == "" {
		host.NodeName, _ = os.Hostname()
	}
	ctx, cancel := context.WithTimeout(ctx, downwardMetricsTimeout)
	defer cancel()
	if v, err := l.mon.QueryVersion(ctx); err == nil {
		host.QEMUVersion = v.String()
	}
	return host
}

// collectDownwardMetrics is one set of figures. A figure that cannot be
// read is left out (the VM's: zero) and its error returned beside the
// rest.
func (l *Launcher) collectDownwardMetrics(ctx context.Context, host downwardmetrics.Host) (*downwardmetrics.Metrics, error) {
	vm, vmErr := l.downwardVM(ctx)
	m, hostErr := host.Collect(vm)
	return m, errors.Join(vmErr, hostErr)
}

// writeDownwardMetrics collects one set of figures and writes them, the
// partial ones too.
func (l *Launcher) writeDownwardMetrics(ctx context.Context, f *os.File, host downwardmetrics.Host) error {
	m, err := l.collectDownwardMetrics(ctx, host)
	if werr := downwardmetrics.Write(f, m); werr != nil {
		return werr
	}
	return err
}

// serveDownwardMetrics answers the guest's requests on the downward
// metrics port (devices.downwardMetrics) until QEMU exits: the launcher
// connects to the port's chardev socket, which QEMU made when it started,
// and serves one request a second at most (downwardmetrics.Serve).
func (l *Launcher) serveDownwardMetrics() {
	if l.vmi.Spec.Domain.Devices.DownwardMetrics == nil {
		return
	}
	ctx, cancel := l.untilExit()
	defer cancel()
	d := net.Dialer{Timeout: qmpConnectTimeout}
	conn, err := d.DialContext(ctx, "unix", l.paths.DownwardMetrics)
	if err != nil {
		klog.ErrorS(err, "Downward metrics port not served", "vmi", klog.KObj(l.vmi))
		return
	}
	host := l.downwardHost(ctx)
	report := func() (*downwardmetrics.Metrics, error) { return l.collectDownwardMetrics(ctx, host) }
	onError := func(err error) { klog.V(2).InfoS("Downward metrics request", "vmi", klog.KObj(l.vmi), "err", err) }
	if err := downwardmetrics.Serve(ctx, conn, downwardmetrics.RequestInterval, report, onError); err != nil {
		klog.ErrorS(err, "Downward metrics port", "vmi", klog.KObj(l.vmi))
	}
}

// downwardVM is the VM's part: its vCPU threads' CPU time (KubeVirt sums
// libvirt's per-vCPU time), the vCPUs and the balloon's size (the guest
// memory without a balloon).
func (l *Launcher) downwardVM(ctx context.Context) (downwardmetrics.VM, error) {
	ctx, cancel := context.WithTimeout(ctx, downwardMetricsTimeout)
	defer cancel()
	var vm downwardmetrics.VM
	vm.MemoryBytes = uint64(l.guestMemory())
	if cmdline.BalloonAttached(&l.vmi.Spec.Domain) {
		if b, err := l.mon.QueryBalloon(ctx); err == nil && b.Actual > 0 {
			vm.MemoryBytes = uint64(b.Actual)
		}
	}
	cpus, err := l.mon.QueryCPUsFast(ctx)
	if err != nil {
		return vm, fmt.Errorf("launcher: downward metrics: vCPUs: %w", err)
	}
	vm.VCPUs = len(cpus)
	pid := l.Domain().PID
	for _, c := range cpus {
		t, err := threadCPUTime(pid, c.ThreadID)
		if err != nil {
			return vm, fmt.Errorf("launcher: downward metrics: vCPU %d: %w", c.CPUIndex, err)
		}
		vm.CPUTime += t
	}
	return vm, nil
}

// threadCPUTime is a thread's user and system time
// (/proc/<pid>/task/<tid>/stat, fields 14 and 15).
func threadCPUTime(pid, tid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/task/%d/stat: no command name", pid, tid)
	}
	f := strings.Fields(s[i+1:]) // from field 3 on
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/task/%d/stat: %d fields", pid, tid, len(f)+2)
	}
	var ticks uint64
	for _, x := range f[11:13] {
		v, err := strconv.ParseUint(x, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/task/%d/stat: %w", pid, tid, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// DownwardMetricsSocketName is the downward metrics port's chardev socket
// in the runtime directory (QEMU's, 107:107, like the guest agent's).
const DownwardMetricsSocketName = "downwardmetrics.sock"
