package cmdserver

import (
	"os"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kemu-dev/kemu/launcher/rpc"
	"github.com/kemu-dev/kemu/qmp"
)

// A figure the balloon driver did not send (QEMU's -1) stays unset; zero
// is a figure.
func TestGuestMemory(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		name string
		in   qmp.BalloonStats
		want *rpc.GuestMemoryStats
	}{
		{name: "none reported",
			in:   qmp.BalloonStats{SwapIn: -1, SwapOut: -1, MajorFaults: -1, MinorFaults: -1, FreeMemory: -1, TotalMemory: -1, AvailableMemory: -1, DiskCaches: -1},
			want: &rpc.GuestMemoryStats{LastUpdateUnix: 7}},
		{name: "all reported",
			in: qmp.BalloonStats{SwapIn: 0, SwapOut: 1, MajorFaults: 2, MinorFaults: 3, FreeMemory: 4, TotalMemory: 5, AvailableMemory: 6, DiskCaches: 7},
			want: &rpc.GuestMemoryStats{SwapInBytes: n(0), SwapOutBytes: n(1), MajorFaults: n(2), MinorFaults: n(3), FreeBytes: n(4),
				TotalBytes: n(5), AvailableBytes: n(6), DiskCachesBytes: n(7), LastUpdateUnix: 7}},
		{name: "older driver without available and caches",
			in: qmp.BalloonStats{SwapIn: 0, SwapOut: 0, MajorFaults: 0, MinorFaults: 0, FreeMemory: 4, TotalMemory: 5, AvailableMemory: -1, DiskCaches: -1},
			want: &rpc.GuestMemoryStats{SwapInBytes: n(0), SwapOutBytes: n(0), MajorFaults: n(0), MinorFaults: n(0), FreeBytes: n(4),
				TotalBytes: n(5), LastUpdateUnix: 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := guestMemory(&qmp.BalloonGuestStats{Stats: tc.in, LastUpdate: 7}); !proto.Equal(got, tc.want) {
				t.Errorf("guestMemory = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParseSchedstat(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64 // -1: unknown
	}{
		{"151545 145295 2\n", 145295},
		{"0 0 0", 0},
		{"151545 145295", -1},
		{"", -1},
		{"1 x 2", -1},
		{"1 -5 2", -1},
	} {
		got := parseSchedstat(tc.in)
		if (got == nil) != (tc.want < 0) || (got != nil && *got != tc.want) {
			t.Errorf("parseSchedstat(%q) = %v, want %d", tc.in, got, tc.want)
		}
	}
	// This thread's own: known on a kernel with scheduler statistics.
	if d := threadRunDelay(os.Getpid(), os.Getpid()); d == nil || *d < 0 {
		t.Errorf("threadRunDelay(self) = %v", d)
	}
	if d := threadRunDelay(os.Getpid(), 1<<30); d != nil {
		t.Errorf("threadRunDelay(no such thread) = %v", *d)
	}
}
