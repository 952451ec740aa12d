package netsetup

import (
	"fmt"

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
