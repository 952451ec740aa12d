package netsetup

import (
	"testing"

	"github.com/vishvananda/netlink"
)

// The tap's transmit side is the guest's receive side.
func TestGuestView(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   *netlink.LinkStatistics
		want NICStats
	}{
		{name: "no statistics", want: NICStats{Interface: "default", Tap: "tap0"}},
		{name: "swapped", in: &netlink.LinkStatistics{RxBytes: 1, RxPackets: 2, RxErrors: 3, RxDropped: 4, TxBytes: 10, TxPackets: 20, TxErrors: 30, TxDropped: 40},
			want: NICStats{Interface: "default", Tap: "tap0", RxBytes: 10, RxPackets: 20, RxErrors: 30, RxDropped: 40, TxBytes: 1, TxPackets: 2, TxErrors: 3, TxDropped: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := guestView("default", "tap0", tc.in); got != tc.want {
				t.Errorf("guestView = %+v, want %+v", got, tc.want)
			}
		})
	}
}
