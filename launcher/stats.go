package launcher

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/kemu-dev/kemu/qmp"
)

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
