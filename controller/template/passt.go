package template

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// NetworkCapabilities are the launcher's capabilities that only wiring
// taps serves (masquerade and bridge: the taps, bridge, nftables table and
// the DHCP server's raw socket on port 67). A VMI without such an
// interface — passt only (passt runs as QEMU's user with no capability and
// uses the Pod's ordinary sockets), or no pod interface at all — runs
// without them, and without /dev/net/tun (NeedsTun).
var NetworkCapabilities = []corev1.Capability{"NET_ADMIN", "NET_RAW", "NET_BIND_SERVICE"}

func withoutNetworkCapabilities(caps []corev1.Capability) []corev1.Capability {
	return slices.DeleteFunc(caps, func(c corev1.Capability) bool { return slices.Contains(NetworkCapabilities, c) })
}
