// Package netsetup wires the pod network to the guest inside the launcher
// Pod's network namespace, with netlink and nftables only (no CNI plugin of
// ours, no iptables, no dnsmasq):
//
//   - masquerade: a bridge holding the guest network's gateway address, a tap
//     enslaved to it, NAT of the guest's traffic out of the pod interface and
//     DNAT of the pod IP's ports to the guest (nftables table per interface);
//   - bridge: the pod interface is enslaved to a bridge and its IPv4 address,
//     routes and MAC move to the guest.
//
// In both the guest is configured by an in-process DHCPv4 server (one
// goroutine per interface) that answers only the guest's MAC.
//
// Plan is pure: it validates the VMI and decides names, MACs, addresses and
// queue counts. Setup applies a Plan in the pod network namespace and hands
// back the taps' fds for QEMU; it is idempotent (a launcher restart finds
// what exists). Teardown removes everything Setup created. See
// docs/netsetup.md.
package netsetup
