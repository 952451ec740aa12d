package cmdline

import (
	"fmt"
	"strconv"
)

// NetdevStream is a stream netdev on an inherited, connected unix socket:
// the QEMU end of a socket pair whose other end passt has (passt --fd).
// QEMU 7.2 (the first with -netdev stream) and 10 both take addr.type=fd.
type NetdevStream struct {
	ID string
	FD int
}

// Args implements Device.
func (s NetdevStream) Args() ([]string, error) {
	if s.FD < 3 {
		return nil, fmt.Errorf("-netdev stream %s: fd %d: inherited fds start at 3", s.ID, s.FD)
	}
	return newOpts("stream").add("id", s.ID).add("server", "off").add("addr.type", "fd").
		add("addr.str", strconv.Itoa(s.FD)).arg("-netdev")
}

// passtNetdev is a NIC's backend when passt serves it (NIC.PasstFD).
func (b *builder) passtNetdev(np, netdev string, nic NIC) {
	switch {
	case len(nic.TapFDs) > 0 || nic.User != nil:
		b.fail(np+".PasstFD", "set with TapFDs or User")
		return
	case len(nic.VhostFDs) > 0:
		b.fail(np+".VhostFDs", "vhost-net needs a tap, not passt")
		return
	}
	b.add(np, NetdevStream{ID: netdev, FD: nic.PasstFD})
}
