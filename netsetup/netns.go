package netsetup

import (
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// selfNetNS is the launcher's own network namespace.
const selfNetNS = "/proc/self/ns/net"

// openNetNS opens the network namespace at path ("" = the launcher's own).
func openNetNS(path string) (netns.NsHandle, error) {
	if path == "" {
		path = selfNetNS
	}
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return netns.None(), fmt.Errorf("opening network namespace %s: %w", path, err)
	}
	return ns, nil
}

// isOwnNetNS says whether ns is the launcher's own network namespace (a
// launcher in its Pod). Sockets for it are then opened where the launcher
// is, without setns: entering a namespace needs CAP_SYS_ADMIN, which the
// launcher no longer has when it takes the network down (launcher/unpriv).
func isOwnNetNS(ns netns.NsHandle) bool {
	self, err := netns.GetFromPath(selfNetNS)
	if err != nil {
		return false
	}
	defer self.Close()
	return self.Equal(ns)
}

// netlinkHandle is a netlink handle in ns.
func netlinkHandle(ns netns.NsHandle) (*netlink.Handle, error) {
	if isOwnNetNS(ns) {
		return netlink.NewHandle()
	}
	return netlink.NewHandleAt(ns)
}
