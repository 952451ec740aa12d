package launcherpod

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// Capabilities is the compute container's base set, all of it for the
// launcher's setup: taps, bridge, nftables and the DHCP server in the Pod's
// network namespace (NetworkCapabilities); QEMU's device cgroup, its eBPF
// program, the private cgroup2 and procfs mounts (SYS_ADMIN, BPF); giving
// QEMU its disks and becoming its user (CHOWN, DAC_OVERRIDE, FOWNER, SETUID,
// SETGID, SETPCAP); stopping it (KILL).
var Capabilities = []corev1.Capability{
	"NET_ADMIN", "NET_RAW", "NET_BIND_SERVICE", "SYS_ADMIN", "BPF",
	"CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID", "SETPCAP", "KILL",
}

// NetworkCapabilities are the base capabilities that only wiring taps
// serves (masquerade and bridge: the taps, bridge, nftables table and the
// DHCP server's raw socket on port 67). A VMI without such an interface —
// passt only (passt runs as QEMU's user with no capability and uses the
// Pod's ordinary sockets), or no pod interface at all — runs without them,
// and without /dev/net/tun.
var NetworkCapabilities = []corev1.Capability{"NET_ADMIN", "NET_RAW", "NET_BIND_SERVICE"}

// FilesystemCapabilities are added for a VMI with domain.devices.filesystems:
// each virtiofsd chroots into its shared directory (as root of its own user
// namespace, launcher/virtiofs.go), and RuntimeDefault seccomp, which it
// inherits, allows chroot(2) only to a container holding SYS_CHROOT
// (docs/deploy.md).
var FilesystemCapabilities = []corev1.Capability{"SYS_CHROOT"}

// PlacementCapabilities are added for a VMI with dedicatedCpuPlacement: the
// launcher (root) pins QEMU's threads, which run as another user (107), with
// sched_setaffinity(2) and, for realtime, sets their SCHED_FIFO policy; both
// need CAP_SYS_NICE. The launcher drops it with the rest of its setup
// capabilities once the VM runs.
var PlacementCapabilities = []corev1.Capability{"SYS_NICE"}

// AllCapabilities is every capability a compute container may hold, sorted:
// the set PasstSeccompProfile is made for.
func AllCapabilities() []corev1.Capability {
	all := slices.Concat(Capabilities, FilesystemCapabilities, PlacementCapabilities)
	slices.Sort(all)
	return slices.Compact(all)
}

// PasstSeccompProfile is the compute container's seccomp profile when the
// VMI has a passt-bound interface, a Localhost profile relative to the
// kubelet's seccomp root (<kubelet-root>/seccomp), which the node agent
// installs (nodeagent/seccomp). passt sandboxes itself with pivot_root(2),
// which the container runtime's default profile (RuntimeDefault) refuses
// to every container; this profile is containerd's default for
// AllCapabilities plus pivot_root. Other launcher Pods run RuntimeDefault.
const PasstSeccompProfile = "kemu/launcher-passt.json"

// SeccompDir is the kubelet's seccomp root under its --root-dir: Localhost
// profiles are looked up there.
const SeccompDir = "seccomp"
