package cmdserver

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/kemu-dev/kemu/launcher/rpc"
	"github.com/kemu-dev/kemu/qmp"
)

// guestMemory is the balloon driver's report, each figure the driver did
// not send (QEMU's -1) left unset.
func guestMemory(g *qmp.BalloonGuestStats) *rpc.GuestMemoryStats {
	opt := func(v int64) *int64 {
		if v < 0 {
			return nil
		}
		return &v
	}
	s := g.Stats
	return &rpc.GuestMemoryStats{TotalBytes: opt(s.TotalMemory), FreeBytes: opt(s.FreeMemory), AvailableBytes: opt(s.AvailableMemory),
		DiskCachesBytes: opt(s.DiskCaches), SwapInBytes: opt(s.SwapIn), SwapOutBytes: opt(s.SwapOut),
		MajorFaults: opt(s.MajorFaults), MinorFaults: opt(s.MinorFaults), LastUpdateUnix: g.LastUpdate}
}

// threadRunDelay is the time a QEMU thread waited on a run queue (nil if
// unknown).
func threadRunDelay(pid, tid int) *int64 {
	if pid <= 0 || tid <= 0 {
		return nil
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/schedstat", pid, tid))
	if err != nil {
		return nil
	}
	return parseSchedstat(string(b))
}

// parseSchedstat reads the run-queue wait (the second field, ns) of a
// /proc schedstat line: "<on cpu ns> <waiting ns> <timeslices>".
func parseSchedstat(s string) *int64 {
	f := strings.Fields(s)
	if len(f) < 3 {
		return nil
	}
	n, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || n < 0 {
		return nil
	}
	return &n
}
