package launcher

import (
	"context"
	"fmt"
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
	host := downwardmetrics.Host{NodeName: l.cfg.NodeName}
	if host.NodeName == "" {
		host.NodeName, _ = os.Hostname()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-l.exited
		cancel()
	}()
	qctx, qcancel := context.WithTimeout(ctx, downwardMetricsTimeout)
	if v, err := l.mon.QueryVersion(qctx); err == nil {
		host.QEMUVersion = v.String()
	}
	qcancel()
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

// writeDownwardMetrics collects one set of figures and writes them. A
// host figure that cannot be read is left out and reported; the rest is
// written anyway.
func (l *Launcher) writeDownwardMetrics(ctx context.Context, f *os.File, host downwardmetrics.Host) error {
	vm, vmErr := l.downwardVM(ctx)
	m, hostErr := host.Collect(vm)
	if err := downwardmetrics.Write(f, m); err != nil {
		return err
	}
	if vmErr != nil {
		return vmErr
	}
	return hostErr
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
