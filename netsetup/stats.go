package netsetup

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
)

// NICStats are the counters of an interface's tap as the guest's NIC sees
// them: what the tap transmits the guest receives, and the other way
// round (libvirt's domain interface statistics do the same).
type NICStats struct {
	Interface                               string // the VMI interface name
	Tap                                     string
	RxBytes, RxPackets, RxErrors, RxDropped uint64
	TxBytes, TxPackets, TxErrors, TxDropped uint64
}

// ErrClosed is returned by NICStats once the Result is closed.
var ErrClosed = errors.New("netsetup: the result is closed")

// NICStats reads each interface's tap counters over netlink in the pod
// network namespace (no privilege needed: an RTM_GETLINK dump).
func (r *Result) NICStats() ([]NICStats, error) {
	r.nsMu.Lock()
	defer r.nsMu.Unlock()
	if r.nsClosed {
		return nil, ErrClosed
	}
	h, err := netlinkHandle(r.ns)
	if err != nil {
		return nil, fmt.Errorf("netlink in the pod network namespace: %w", err)
	}
	defer h.Close()
	out := make([]NICStats, 0, len(r.Interfaces))
	for _, ir := range r.Interfaces {
		l, err := h.LinkByName(ir.Tap)
		if err != nil {
			return nil, fmt.Errorf("tap %s of interface %s: %w", ir.Tap, ir.Name, err)
		}
		out = append(out, guestView(ir.Name, ir.Tap, l.Attrs().Statistics))
	}
	return out, nil
}

// guestView turns a tap's counters into the guest NIC's (nil: all zero).
func guestView(iface, tap string, s *netlink.LinkStatistics) NICStats {
	n := NICStats{Interface: iface, Tap: tap}
	if s == nil {
		return n
	}
	n.RxBytes, n.RxPackets, n.RxErrors, n.RxDropped = s.TxBytes, s.TxPackets, s.TxErrors, s.TxDropped
	n.TxBytes, n.TxPackets, n.TxErrors, n.TxDropped = s.RxBytes, s.RxPackets, s.RxErrors, s.RxDropped
	return n
}
