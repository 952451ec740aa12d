package cmdserver

import (
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
