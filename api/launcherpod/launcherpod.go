// Package launcherpod is the contract about a launcher Pod between the
// processes that make it, run in it and talk to it: the controller renders
// the Pod (controller/template), kemu-launcher runs in it, the node agent
// finds its socket and its Pod by label, the device plugins serve its
// resources. Every label, path, socket name, resource name and
// kemu-launcher flag of that contract is defined here once.
package launcherpod

import (
	corev1 "k8s.io/api/core/v1"
)

// Labels of launcher Pods.
const (
	// AppLabel is AppLauncher on every launcher Pod.
	AppLabel = "kemu.dev/app"
	// AppLauncher is AppLabel's value.
	AppLauncher = "launcher"
	// CreatedByLabel is the UID of the VMI the Pod runs (KubeVirt's
	// kubevirt.io/created-by).
	CreatedByLabel = "kemu.dev/created-by"
	// VMINameLabel is the name of the VMI the Pod runs (cut and hashed when
	// the name is no valid label value).
	VMINameLabel = "kemu.dev/vmi-name"
	// MigrationUIDLabel is on a migration's target Pod only: the UID of
	// its VirtualMachineInstanceMigration (KubeVirt's
	// kubevirt.io/migrationJobUID).
	MigrationUIDLabel = "kemu.dev/migration-uid"
)

// Device-plugin resources (devices/deviceplugin serves them, launcher Pods
// request them).
const (
	ResourceKVM      corev1.ResourceName = "devices.kemu.dev/kvm"
	ResourceTun      corev1.ResourceName = "devices.kemu.dev/tun"
	ResourceVhostNet corev1.ResourceName = "devices.kemu.dev/vhost-net"
)

// ExitStopped is kemu-launcher's exit status (the compute container's)
// when the host stopped the VM: a signal before it started or without the
// node agent's Shutdown RPC (the kubelet's own stop: a failed livenessProbe,
// an eviction), the grace period over, killed. launcher/signals.ExitStopped
// is this value; the VMI controller reads it from a failed launcher Pod.
const ExitStopped = 3

// Containers, volumes and paths inside the launcher Pod.
const (
	ComputeContainer = "compute"
	// SocketsVolume is the emptyDir holding Socket; the node agent finds it
	// at <kubelet-root>/pods/<pod uid>/volumes/kubernetes.io~empty-dir/sockets/.
	SocketsVolume = "sockets"
	SocketsDir    = "/var/run/kemu/sockets"
	// InitSocket is where kemu-launcher's command server listens first; it
	// renames it to Socket once it answers (the readiness signal).
	InitSocket = "launcher-init.sock"
	Socket     = "launcher.sock"
	// PrivateVolume holds the VM's runtime directory (overlays, ISOs, EFI
	// variables); the launcher removes RuntimeDir itself when the VM ends.
	PrivateVolume = "private"
	PrivateDir    = "/var/run/kemu/private"
	RuntimeDir    = PrivateDir + "/vm"
	// ImagesVolume is the launcher's image cache (unused when containerDisks
	// and kernelBoot come copied by the init containers).
	ImagesVolume = "images"
	ImageCache   = "/var/lib/kemu/images"
	// PVCRoot holds claims: a block device PVCRoot/<claim> or a file system
	// at PVCRoot/<claim>/ (disk.img).
	PVCRoot = "/var/run/kemu/pvcs"
	// SecretsDir holds cloud-init secrets: SecretsDir/<secret>/<key>.
	SecretsDir = "/var/run/kemu/secrets"
	// ConfigVolumesDir/<volume>/ is each config volume (configMap, secret,
	// serviceAccount, downwardAPI, sysprep) as the kubelet mounts it; the
	// launcher turns it into an ISO image.
	ConfigVolumesDir = "/var/run/kemu/config"
	// ToolsVolume is the emptyDir the first init container fills with the
	// static kemu-copy helper from the launcher image.
	ToolsVolume = "kemu-tools"
	ToolsDir    = "/var/run/kemu/tools"
	// CopyBinary is kemu-copy's path in the launcher image.
	CopyBinary = "/usr/bin/kemu-copy"
	// ContainerDisksDir/<volume>/ holds each containerDisk's disk, copied
	// out of its image by an init container.
	ContainerDisksDir = "/var/run/kemu/container-disks"
	// KernelBootDir holds firmware.kernelBoot.container's kernel and initrd,
	// copied out of its image by an init container.
	KernelBootVolume = "kernel-boot"
	KernelBootDir    = "/var/run/kemu/kernel-boot"
	// DefaultDiskDir is where a containerDisk image keeps its disk when the
	// volume names no path (KubeVirt's /disk/).
	DefaultDiskDir = "/disk"
	// HugepagesDir is the hugetlbfs emptyDir (medium HugePages-<size>) of
	// a VMI with spec.domain.memory.hugepages; QEMU's guest memory is a
	// file in it.
	HugepagesVolume = "hugepages"
	HugepagesDir    = "/var/run/kemu/hugepages"
)

// HugepagesResource is the Pod resource of hugepages of pageSize ("2Mi":
// hugepages-2Mi).
func HugepagesResource(pageSize string) corev1.ResourceName {
	return corev1.ResourceName(corev1.ResourceHugePagesPrefix + pageSize)
}

// HugepagesMedium is the emptyDir medium of hugepages of pageSize.
func HugepagesMedium(pageSize string) corev1.StorageMedium {
	return corev1.StorageMedium(string(corev1.StorageMediumHugePagesPrefix) + pageSize)
}
