package netsetup

import (
	"crypto/sha256"
	"fmt"
	"net"
)

// DeriveMAC returns a stable, locally administered unicast MAC for the VMI
// with uid and the interface name: the same VMI interface gets the same MAC
// on every start, and different ones differ (SHA-256 of uid and name).
func DeriveMAC(uid, iface string) net.HardwareAddr {
	sum := sha256.Sum256([]byte("kemu-mac\x00" + uid + "\x00" + iface))
	mac := net.HardwareAddr(sum[:6])
	mac[0] = mac[0]&^0x01 | 0x02 // unicast, locally administered
	return mac
}

// parseMAC parses a 48-bit unicast MAC address.
func parseMAC(s string) (net.HardwareAddr, error) {
	hw, err := net.ParseMAC(s)
	switch {
	case err != nil || len(hw) != 6:
		return nil, fmt.Errorf("must be a 48-bit MAC address like 02:00:00:00:00:01")
	case hw[0]&1 == 1:
		return nil, fmt.Errorf("must be a unicast address")
	}
	return hw, nil
}
