package launcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/launcher/cmdline"
	"github.com/kemu-dev/kemu/netsetup"
	"github.com/kemu-dev/kemu/qmp"
)

// Stats are the VM's counters.
type Stats struct {
	VCPUs   []qmp.CPUInfoFast
	Blocks  []BlockStats
	Balloon *qmp.BalloonInfo
	// GuestMemory is what the guest's balloon driver last reported; nil
	// without a balloon or before the driver reported.
	GuestMemory *qmp.BalloonGuestStats
	// NICs are the pod-network interfaces' counters (their taps); none
	// without a pod network.
	NICs []netsetup.NICStats
	// Migration is the outgoing migration under way with query-migrate's
	// figures of now; nil when none is.
	Migration *Migration
	// CPU is the CPU time QEMU's device cgroup used (all its threads), 0
	// without the cgroup; RSS is QEMU's resident memory.
	CPU time.Duration
	RSS uint64
}

// BlockStats are a block node's counters and the VMI disk it belongs to
// ("" for a node of no disk: firmware).
type BlockStats struct {
	qmp.BlockStats
	Drive string
}

// BalloonStatsPeriod is how often QEMU asks the guest's balloon driver for
// its memory statistics (KubeVirt asks libvirt for every 10 s; a scrape
// every 15-30 s then always sees fresh figures).
const BalloonStatsPeriod = 5 * time.Second

// Stats reads CPU, block, balloon and guest memory figures over QMP, the
// taps' counters over netlink, QEMU's CPU time from its cgroup and its
// resident memory from /proc.
func (l *Launcher) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	if l.cgroup != nil {
		m, err := l.cgroup.Stats()
		if err != nil {
			return s, err
		}
		if m.CPU != nil {
			s.CPU = time.Duration(m.CPU.UsageUsec) * time.Microsecond
		}
	}
	d := l.Domain()
	if d.PID > 0 {
		s.RSS = residentBytes(d.PID)
	}
	var err error
	if s.VCPUs, err = l.mon.QueryCPUsFast(ctx); err != nil {
		return s, err
	}
	blocks, err := l.mon.QueryBlockstats(ctx)
	if err != nil {
		return s, err
	}
	drives := l.driveNames()
	for _, b := range blocks {
		s.Blocks = append(s.Blocks, BlockStats{BlockStats: b, Drive: drives[b.NodeName]})
	}
	if b, err := l.mon.QueryBalloon(ctx); err == nil {
		s.Balloon = &b
	}
	if cmdline.BalloonAttached(&l.vmi.Spec.Domain) {
		if g, err := l.mon.QueryBalloonGuestStats(ctx, cmdline.BalloonQOMPath); err == nil && g.LastUpdate > 0 {
			s.GuestMemory = &g
		}
	}
	if m := d.Migration; m != nil && m.Role == RoleSource && qmp.MigrationStatusMoving(m.Status) {
		s.Migration = m
		// The domain's figures are as of the last pass; RAM moving, ask.
		if info, err := l.mon.QueryMigrate(ctx); err == nil && info.RAM != nil && qmp.MigrationStatusMoving(info.Status) {
			s.Migration = m.withInfo(info)
		}
	}
	if l.net != nil {
		// A network being torn down (QEMU ended) has no counters left.
		if s.NICs, err = l.net.NICStats(); err != nil && !errors.Is(err, netsetup.ErrClosed) {
			return s, fmt.Errorf("launcher: network statistics: %w", err)
		}
	}
	return s, nil
}

// driveNames maps each disk's format node to the disk's name.
func (l *Launcher) driveNames() map[string]string {
	m := map[string]string{}
	for _, d := range l.vmi.Spec.Domain.Devices.Disks {
		m[cmdline.NodeName(d.Name)] = d.Name
	}
	return m
}

// pollBalloonStats asks QEMU to poll the guest's balloon driver for memory
// statistics every BalloonStatsPeriod (QEMU's default: never). A failure
// only costs the guest memory figures.
func (l *Launcher) pollBalloonStats(ctx context.Context) {
	if !cmdline.BalloonAttached(&l.vmi.Spec.Domain) {
		return
	}
	if err := l.mon.QOMSet(ctx, cmdline.BalloonQOMPath, qmp.BalloonPollingProperty, int(BalloonStatsPeriod/time.Second)); err != nil {
		klog.ErrorS(err, "Balloon statistics polling not enabled; no guest memory figures", "vmi", klog.KObj(l.vmi))
	}
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
