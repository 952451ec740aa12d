package launcherpod

import (
	"flag"
	"fmt"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// kemu-launcher's flags of the Pod contract (Config).
const (
	FlagSocketsDir       = "sockets-dir"
	FlagRuntimeDir       = "runtime-dir"
	FlagImageCache       = "image-cache"
	FlagPVCRoot          = "pvc-root"
	FlagSecretsDir       = "secrets-dir"
	FlagConfigDir        = "config-dir"
	FlagContainerDiskDir = "container-disk-dir"
	FlagKernelBootDir    = "kernel-boot-dir"
	FlagImageVolumes     = "image-volumes"
	FlagAccel            = "accel"
	FlagGracePeriod      = "grace-period"
	FlagVMIUID           = "vmi-uid"
	FlagAllowRawQMP      = "allow-raw-qmp"
	FlagNodeName         = "node-name"
)

// Config is kemu-launcher's configuration as a launcher Pod gives it: the
// controller renders it with Args, kemu-launcher reads it with Bind, and a
// round-trip test holds them together.
type Config struct {
	// SocketsDir is where launcher.sock is created.
	SocketsDir string
	// RuntimeDir is the VM's private runtime directory (removed when the VM
	// ends).
	RuntimeDir string
	// ImageCache caches container image files.
	ImageCache string
	// PVCRoot and SecretsDir are where claims and cloud-init secrets are
	// mounted.
	PVCRoot, SecretsDir string
	// ConfigDir holds the config volumes: <ConfigDir>/<volume>/.
	ConfigDir string
	// ContainerDiskDir and KernelBootDir hold what the init containers
	// copied out of the containerDisk and kernel-boot images; "": pull them.
	ContainerDiskDir, KernelBootDir string
	// ImageVolumes says the images under ContainerDiskDir and KernelBootDir
	// are mounted by the kubelet (Kubernetes image volumes: each its own
	// root), not copied out by init containers.
	ImageVolumes bool
	// Accel is "kvm", "tcg", or "" to probe KVM.
	Accel string
	// GracePeriod of the graceful shutdown; 0: the VMI's.
	GracePeriod time.Duration
	// VMIUID is the VMI this launcher runs: Info reports it to the node
	// agent and Sync refuses any other VMI. "": any (standalone).
	VMIUID types.UID
	// AllowRawQMP lets the Qmp RPC pass any QMP command and keeps QEMU's
	// second QMP socket: debugging only, the controller never sets it.
	AllowRawQMP bool
	// NodeName is the Kubernetes node's name, the HostName of the
	// downward metrics; the launcher Pod passes $(NodeNameEnv), its
	// spec.nodeName. "": the machine's host name (standalone).
	NodeName string
}

// NodeNameEnv is the compute container's variable holding spec.nodeName.
const NodeNameEnv = "KEMU_NODE_NAME"

// Defaults is what kemu-launcher assumes for flags it is not given.
func Defaults() Config {
	return Config{SocketsDir: SocketsDir, RuntimeDir: "/var/run/kemu/vm", ImageCache: ImageCache}
}

// Args renders c as kemu-launcher's flags, every field given explicitly.
func (c Config) Args() []string {
	return []string{
		flagArg(FlagSocketsDir, c.SocketsDir),
		flagArg(FlagRuntimeDir, c.RuntimeDir),
		flagArg(FlagImageCache, c.ImageCache),
		flagArg(FlagPVCRoot, c.PVCRoot),
		flagArg(FlagSecretsDir, c.SecretsDir),
		flagArg(FlagConfigDir, c.ConfigDir),
		flagArg(FlagContainerDiskDir, c.ContainerDiskDir),
		flagArg(FlagKernelBootDir, c.KernelBootDir),
		flagArg(FlagImageVolumes, strconv.FormatBool(c.ImageVolumes)),
		flagArg(FlagAccel, c.Accel),
		flagArg(FlagGracePeriod, c.GracePeriod.String()),
		flagArg(FlagVMIUID, string(c.VMIUID)),
		flagArg(FlagAllowRawQMP, strconv.FormatBool(c.AllowRawQMP)),
		flagArg(FlagNodeName, c.NodeName),
	}
}

func flagArg(name, value string) string { return fmt.Sprintf("--%s=%s", name, value) }

// Bind registers c's flags on fs with c's values as defaults (start from
// Defaults()).
func (c *Config) Bind(fs *flag.FlagSet) {
	fs.StringVar(&c.SocketsDir, FlagSocketsDir, c.SocketsDir, "where launcher.sock is created")
	fs.StringVar(&c.RuntimeDir, FlagRuntimeDir, c.RuntimeDir, "the VM's private runtime directory (removed when the VM ends)")
	fs.StringVar(&c.ImageCache, FlagImageCache, c.ImageCache, "cache of container image files")
	fs.StringVar(&c.PVCRoot, FlagPVCRoot, c.PVCRoot, "where persistentVolumeClaim volumes are mounted")
	fs.StringVar(&c.SecretsDir, FlagSecretsDir, c.SecretsDir, "where cloud-init secret volumes are mounted")
	fs.StringVar(&c.ConfigDir, FlagConfigDir, c.ConfigDir, "where configMap, secret, serviceAccount, downwardAPI and sysprep volumes are mounted (<dir>/<volume>/); empty: none can be used")
	fs.StringVar(&c.ContainerDiskDir, FlagContainerDiskDir, c.ContainerDiskDir, "where the Pod's init containers copied containerDisks (<dir>/<volume>/); empty: pull the images into --"+FlagImageCache)
	fs.StringVar(&c.KernelBootDir, FlagKernelBootDir, c.KernelBootDir, "where the Pod's init container copied the kernel-boot image's kernel and initrd; empty: pull the image into --"+FlagImageCache)
	fs.BoolVar(&c.ImageVolumes, FlagImageVolumes, c.ImageVolumes, "--"+FlagContainerDiskDir+"'s and --"+FlagKernelBootDir+"'s images are mounted by the kubelet (image volumes: each image's root), not copied out of them")
	fs.StringVar(&c.Accel, FlagAccel, c.Accel, `accelerator: kvm, tcg, or "" to probe KVM`)
	fs.DurationVar(&c.GracePeriod, FlagGracePeriod, c.GracePeriod, "graceful shutdown period (0: the VMI's terminationGracePeriodSeconds)")
	fs.Func(FlagVMIUID, "the UID of the VMI this launcher runs (set by the launcher Pod): Info reports it to the node agent and Sync refuses any other VMI; empty: any",
		func(s string) error { c.VMIUID = types.UID(s); return nil })
	fs.StringVar(&c.NodeName, FlagNodeName, c.NodeName, "the Kubernetes node's name, reported to the guest as the downward metrics' HostName; empty: this machine's host name")
	fs.BoolVar(&c.AllowRawQMP, FlagAllowRawQMP, c.AllowRawQMP, "debugging only: let the Qmp RPC pass any QMP command (default: read-only query commands) and keep QEMU's second QMP socket")
}
