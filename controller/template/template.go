// Package template renders a VMI's launcher Pod. It holds no state and makes
// no API calls: the VMI controller decides that a Pod is needed (and whether
// the VM gets KVM), the Service turns that into a Pod spec (KubeVirt's
// template service).
package template

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/api/validation"
)

// launcherCapabilities are the compute container's capabilities for vmi.
func launcherCapabilities(vmi *v1.VirtualMachineInstance) []corev1.Capability {
	caps := append([]corev1.Capability(nil), launcherpod.Capabilities...)
	if !NeedsTun(vmi) {
		caps = withoutNetworkCapabilities(caps)
	}
	if len(vmi.Spec.Domain.Devices.Filesystems) > 0 {
		caps = append(caps, launcherpod.FilesystemCapabilities...)
	}
	if Dedicated(vmi) {
		caps = append(caps, launcherpod.PlacementCapabilities...)
	}
	return caps
}

// GracePeriodPadding is added to the VMI's terminationGracePeriodSeconds for
// the Pod: after the guest's grace period the launcher sends quit, kills QEMU
// 5 s later and cleans up (KubeVirt pads by 15 s as well).
const GracePeriodPadding int64 = 15

// DefaultCPURequest is the compute container's CPU request when the VMI asks
// for none (KubeVirt's default of 100m).
var DefaultCPURequest = resource.MustParse("100m")

// Options configure a Service.
type Options struct {
	// LauncherImage runs kemu-launcher (and holds kemu-copy). Required.
	LauncherImage string
	// LauncherPullPolicy for the launcher image; "" is Kubernetes' default.
	LauncherPullPolicy corev1.PullPolicy
	// LauncherArgs are appended to the launcher's flags (e.g. "-v=2").
	LauncherArgs []string
	// HostDiskDirs are the node directories hostDisks may live under
	// (kemu-config hostDiskDirs); none: no hostDisk is rendered.
	HostDiskDirs []string
	// ImageVolumes mounts containerDisk and kernel-boot images as
	// Kubernetes image volumes (kemu-config imageVolumes) instead of
	// copying them out with init containers.
	ImageVolumes bool
}

// Service renders launcher Pods.
type Service struct{ opts Options }

// HostDiskDirs are the directories hostDisks may live under.
func (s *Service) HostDiskDirs() []string { return s.opts.HostDiskDirs }

// NewService returns a Service.
func NewService(opts Options) *Service { return &Service{opts: opts} }

// Input is what the controller decided about a VMI's Pod.
type Input struct {
	// VMI is defaulted and valid.
	VMI *v1.VirtualMachineInstance
	// KVM: the Pod requests devices.kemu.dev/kvm and the launcher runs
	// --accel=kvm; otherwise --accel=tcg and the TCG overhead.
	KVM bool
	// PVCBlock says, per claim name, whether the claim is a block volume
	// (volumeDevices) rather than a file system (volumeMounts). Missing
	// claims are file systems.
	PVCBlock map[string]bool
	// BackendStorage is the VM's backend storage claim (a persistent
	// TPM's state, backendstorage.go), which the controller made sure
	// of; required when the VMI needs one.
	BackendStorage string
}

// Render returns the launcher Pod of in.VMI.
func (s *Service) Render(in Input) (*corev1.Pod, error) {
	vmi := in.VMI
	if s.opts.LauncherImage == "" {
		return nil, fmt.Errorf("template: no launcher image configured")
	}
	if vmi.UID == "" {
		return nil, fmt.Errorf("template: VMI %s/%s has no UID", vmi.Namespace, vmi.Name)
	}
	grace := v1.DefaultTerminationGracePeriodSeconds
	if vmi.Spec.TerminationGracePeriodSeconds != nil {
		grace = *vmi.Spec.TerminationGracePeriodSeconds
	}
	podGrace := grace + GracePeriodPadding

	labels := map[string]string{}
	for k, v := range vmi.Labels {
		labels[k] = v // Services select VMs by their VMI's labels
	}
	annotations := PodAnnotations(vmi.Annotations)
	multus, err := MultusAnnotations(vmi)
	if err != nil {
		return nil, err
	}
	for k, v := range multus {
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[k] = v
	}
	labels[launcherpod.AppLabel] = launcherpod.AppLauncher
	labels[launcherpod.CreatedByLabel] = string(vmi.UID)
	labels[launcherpod.VMINameLabel] = launcherpod.VMINameLabelValue(vmi.Name)

	nodeSelector := map[string]string{}
	for k, v := range vmi.Spec.NodeSelector {
		nodeSelector[k] = v
	}
	nodeSelector[v1.NodeSchedulableLabel] = "true"
	if m := vmi.Spec.Domain.Machine; m != nil {
		if label, ok := v1.MachineTypeNodeSelector(m.Type); ok {
			nodeSelector[label] = "true" // a node whose QEMU has it
		}
	}

	b := &builder{vmi: vmi, in: in, opts: s.opts}
	if err := b.volumes(); err != nil {
		return nil, err
	}
	compute := corev1.Container{
		Name:            launcherpod.ComputeContainer,
		Image:           s.opts.LauncherImage,
		ImagePullPolicy: s.opts.LauncherPullPolicy,
		Command:         []string{"kemu-launcher"},
		Args:            b.args(grace),
		Env: []corev1.EnvVar{{Name: launcherpod.NodeNameEnv,
			ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "spec.nodeName"}}}},
		Resources:     b.resources(),
		VolumeMounts:  b.mounts,
		VolumeDevices: b.devices,
		SecurityContext: &corev1.SecurityContext{
			// Exactly what the launcher's setup needs (docs/deploy.md);
			// once QEMU runs the launcher keeps only KILL and NET_ADMIN
			// (launcher/unpriv), and QEMU gets none. No SYS_RESOURCE:
			// runc refuses a capability missing from the host's bounding
			// set. allowPrivilegeEscalation cannot be false beside
			// SYS_ADMIN (the API server refuses the pair).
			Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: launcherCapabilities(b.in.VMI)},
			SeccompProfile: seccompProfile(b.in.VMI),
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		Ports:                    containerPorts(vmi),
		ReadinessProbe:           podProbe(vmi.Spec.ReadinessProbe),
		LivenessProbe:            podProbe(vmi.Spec.LivenessProbe),
	}
	no := false
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        launcherpod.PodName(vmi),
			Namespace:   vmi.Namespace,
			Labels:      labels,
			Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vmi,
				v1.SchemeGroupVersion.WithKind("VirtualMachineInstance"))},
		},
		Spec: corev1.PodSpec{
			InitContainers:                b.initContainers,
			Containers:                    []corev1.Container{compute},
			Volumes:                       b.podVolumes,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &podGrace,
			NodeSelector:                  nodeSelector,
			Affinity:                      vmi.Spec.Affinity.DeepCopy(),
			Tolerations:                   append([]corev1.Toleration(nil), vmi.Spec.Tolerations...),
			AutomountServiceAccountToken:  &no,
			ServiceAccountName:            b.serviceAccount,
			EnableServiceLinks:            &no,
			Hostname:                      v1.VMIHostname(vmi),
			Subdomain:                     vmi.Spec.Subdomain,
			PriorityClassName:             vmi.Spec.PriorityClassName,
			SchedulerName:                 vmi.Spec.SchedulerName,
		},
	}
	return pod, nil
}

type builder struct {
	vmi            *v1.VirtualMachineInstance
	in             Input
	opts           Options
	podVolumes     []corev1.Volume
	mounts         []corev1.VolumeMount
	devices        []corev1.VolumeDevice
	initContainers []corev1.Container
	secrets        map[string]bool
	hostDirs       map[string]bool
	serviceAccount string // a serviceAccount volume's; "" for none
	copyInstalled  bool
}

func emptyDir(name string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
}

// imageVolume mounts an image read-only at mountPath of the compute
// container (Options.ImageVolumes): the kubelet pulls it as for a container
// (pull policy, image pull errors on the Pod) and the launcher resolves
// paths inside it.
func (b *builder) imageVolume(name, image string, pull corev1.PullPolicy, mountPath string) {
	b.podVolumes = append(b.podVolumes, corev1.Volume{Name: name,
		VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: image, PullPolicy: pull}}})
	b.mounts = append(b.mounts, corev1.VolumeMount{Name: name, MountPath: mountPath, ReadOnly: true})
}

// Small fixed resources for the init containers (kemu-copy streams files).
var initResources = corev1.ResourceRequirements{
	Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("40Mi")},
	Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("40Mi")},
}

func (b *builder) volumes() error {
	b.podVolumes = append(b.podVolumes, emptyDir(launcherpod.SocketsVolume), emptyDir(launcherpod.PrivateVolume), emptyDir(launcherpod.ImagesVolume))
	b.mounts = append(b.mounts,
		corev1.VolumeMount{Name: launcherpod.SocketsVolume, MountPath: launcherpod.SocketsDir},
		corev1.VolumeMount{Name: launcherpod.PrivateVolume, MountPath: launcherpod.PrivateDir},
		corev1.VolumeMount{Name: launcherpod.ImagesVolume, MountPath: launcherpod.ImageCache},
	)
	b.secrets, b.hostDirs = map[string]bool{}, map[string]bool{}
	var diskIndex int
	for _, vol := range b.vmi.Spec.Volumes {
		switch {
		case vol.ContainerDisk != nil:
			b.containerDisk(diskIndex, &vol)
			diskIndex++
		case vol.PersistentVolumeClaim != nil, vol.DataVolume != nil, vol.Ephemeral != nil:
			claim, readOnly, _ := v1.VolumeClaim(&vol)
			b.pvc(claim, readOnly)
		case vol.HostDisk != nil:
			if err := b.hostDisk(vol.HostDisk); err != nil {
				return err
			}
		case vol.CloudInitNoCloud != nil && vol.CloudInitNoCloud.SecretRef != nil:
			b.secret(vol.CloudInitNoCloud.SecretRef.Name)
		case vol.CloudInitConfigDrive != nil && vol.CloudInitConfigDrive.SecretRef != nil:
			b.secret(vol.CloudInitConfigDrive.SecretRef.Name)
		default:
			b.configVolume(&vol)
		}
	}
	if fw := b.vmi.Spec.Domain.Firmware; fw != nil && fw.KernelBoot != nil && fw.KernelBoot.Container != nil {
		b.kernelBoot(fw.KernelBoot.Container)
	}
	b.hugepagesVolume()
	return b.backendStorage()
}

// installCopy adds, once, the init container that installs kemu-copy from
// the launcher image into the tools emptyDir.
func (b *builder) installCopy() {
	if b.copyInstalled {
		return
	}
	b.copyInstalled = true
	b.podVolumes = append(b.podVolumes, emptyDir(launcherpod.ToolsVolume))
	b.initContainers = append(b.initContainers, corev1.Container{
		Name:            "install-kemu-copy",
		Image:           b.opts.LauncherImage,
		ImagePullPolicy: b.opts.LauncherPullPolicy,
		Command:         []string{launcherpod.CopyBinary, launcherpod.CopyBinary, launcherpod.ToolsDir},
		VolumeMounts:    []corev1.VolumeMount{{Name: launcherpod.ToolsVolume, MountPath: launcherpod.ToolsDir}},
		Resources:       guaranteedInit(b.vmi, initResources),
	})
}

// kernelBoot: with Options.ImageVolumes, the kernel-boot image mounted at
// --kernel-boot-dir; otherwise an init container running it copies its
// kernel and initrd into an emptyDir the launcher reads, as for
// containerDisks: the kubelet pulls the image.
func (b *builder) kernelBoot(c *v1.KernelBootContainer) {
	pull := c.ImagePullPolicy
	if pull == "" {
		pull = v1.DefaultPullPolicy(c.Image)
	}
	if b.opts.ImageVolumes {
		b.imageVolume(launcherpod.KernelBootVolume, c.Image, pull, launcherpod.KernelBootDir)
		return
	}
	b.installCopy()
	cmd := []string{path.Join(launcherpod.ToolsDir, "kemu-copy")}
	for _, p := range []string{c.KernelPath, c.InitrdPath} {
		if p != "" {
			cmd = append(cmd, p)
		}
	}
	b.podVolumes = append(b.podVolumes, emptyDir(launcherpod.KernelBootVolume))
	b.initContainers = append(b.initContainers, corev1.Container{
		Name:            launcherpod.KernelBootVolume,
		Image:           c.Image,
		ImagePullPolicy: pull,
		Command:         append(cmd, launcherpod.KernelBootDir),
		VolumeMounts: []corev1.VolumeMount{
			{Name: launcherpod.ToolsVolume, MountPath: launcherpod.ToolsDir, ReadOnly: true},
			{Name: launcherpod.KernelBootVolume, MountPath: launcherpod.KernelBootDir},
		},
		Resources: guaranteedInit(b.vmi, initResources),
	})
	b.mounts = append(b.mounts, corev1.VolumeMount{Name: launcherpod.KernelBootVolume, MountPath: launcherpod.KernelBootDir, ReadOnly: true})
}

// containerDisk: with Options.ImageVolumes, the image mounted read-only at
// <ContainerDisksDir>/<volume> (the launcher finds the disk inside it).
// Otherwise the first containerDisk adds the init container that installs
// kemu-copy into the tools emptyDir; each one adds an emptyDir and an init
// container running its image with kemu-copy, which copies the disk (the
// volume's path, else every file of /disk/) into the emptyDir. Either way
// the kubelet pulls the image (pull policy, node image cache, image pull
// errors on the Pod as for any container); the image needs no shell or
// tools.
func (b *builder) containerDisk(i int, vol *v1.Volume) {
	cd := vol.ContainerDisk
	name := "container-disk-" + strconv.Itoa(i)
	dst := path.Join(launcherpod.ContainerDisksDir, vol.Name)
	pull := cd.ImagePullPolicy
	if pull == "" {
		pull = v1.DefaultPullPolicy(cd.Image)
	}
	if b.opts.ImageVolumes {
		b.imageVolume(name, cd.Image, pull, dst)
		return
	}
	b.installCopy()
	src := launcherpod.DefaultDiskDir
	if cd.Path != "" {
		src = cd.Path
	}
	b.podVolumes = append(b.podVolumes, emptyDir(name))
	b.initContainers = append(b.initContainers, corev1.Container{
		Name:            name,
		Image:           cd.Image,
		ImagePullPolicy: pull,
		Command:         []string{path.Join(launcherpod.ToolsDir, "kemu-copy"), src, dst},
		VolumeMounts: []corev1.VolumeMount{
			{Name: launcherpod.ToolsVolume, MountPath: launcherpod.ToolsDir, ReadOnly: true},
			{Name: name, MountPath: dst},
		},
		Resources: guaranteedInit(b.vmi, initResources),
	})
	b.mounts = append(b.mounts, corev1.VolumeMount{Name: name, MountPath: dst, ReadOnly: true})
}

// pvc attaches a claim at launcherpod.PVCRoot/<claim>: a block device
// (volumeDevices) or a mounted file system, read-only when every volume
// using it only reads it (a readOnly claim, an ephemeral volume's base).
func (b *builder) pvc(claim string, readOnly bool) {
	name := "pvc-" + shortHash(claim)
	for i := range b.podVolumes {
		if b.podVolumes[i].Name != name {
			continue
		}
		// The same claim used twice: writable if either use writes.
		if !readOnly {
			b.podVolumes[i].PersistentVolumeClaim.ReadOnly = false
			for j := range b.mounts {
				if b.mounts[j].Name == name {
					b.mounts[j].ReadOnly = false
				}
			}
		}
		return
	}
	b.podVolumes = append(b.podVolumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: readOnly}}})
	p := path.Join(launcherpod.PVCRoot, claim)
	if b.in.PVCBlock[claim] {
		b.devices = append(b.devices, corev1.VolumeDevice{Name: name, DevicePath: p})
		return
	}
	b.mounts = append(b.mounts, corev1.VolumeMount{Name: name, MountPath: p, ReadOnly: readOnly})
}

// hostDisk mounts, at the same path, only what the VMI's hostDisk needs
// from the node: the file itself for Disk (it must exist), the allowed
// directory (Options.HostDiskDirs) it lies beneath for DiskOrCreate (the
// launcher creates the file). Never a parent outside the allowed list. The
// controller has refused paths outside it (validation.ValidateHostDisks);
// Render checks again.
func (b *builder) hostDisk(hd *v1.HostDisk) error {
	root, ok := validation.HostDiskRoot(hd.Path, b.opts.HostDiskDirs)
	if !ok || path.Clean(hd.Path) != hd.Path {
		return fmt.Errorf("template: hostDisk %q is not beneath a directory of %s %v", hd.Path, validation.HostDiskDirsKey, b.opts.HostDiskDirs)
	}
	src, t := hd.Path, corev1.HostPathFile
	if hd.Type == v1.HostDiskExistsOrCreate {
		src, t = root, corev1.HostPathDirectory
	}
	if b.hostDirs[src] {
		return nil
	}
	b.hostDirs[src] = true
	name := "hostdisk-" + shortHash(src)
	b.podVolumes = append(b.podVolumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
		HostPath: &corev1.HostPathVolumeSource{Path: src, Type: &t}}})
	b.mounts = append(b.mounts, corev1.VolumeMount{Name: name, MountPath: src})
	return nil
}

func (b *builder) secret(name string) {
	if b.secrets[name] {
		return
	}
	b.secrets[name] = true
	vn := "secret-" + shortHash(name)
	b.podVolumes = append(b.podVolumes, corev1.Volume{Name: vn, VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{SecretName: name}}})
	b.mounts = append(b.mounts, corev1.VolumeMount{Name: vn, MountPath: path.Join(launcherpod.SecretsDir, name), ReadOnly: true})
}

// configVolume mounts a config volume's source (configMap, secret,
// downwardAPI, serviceAccount, sysprep) read-only at
// <ConfigVolumesDir>/<volume>/, where the launcher makes an ISO image of
// it. A serviceAccount volume makes the Pod run as that ServiceAccount
// (KubeVirt's rule) and projects what automounting would give a container
// — token, ca.crt, namespace — only there: the compute container gets no
// token mount of its own.
func (b *builder) configVolume(vol *v1.Volume) {
	var src corev1.VolumeSource
	switch {
	case vol.ConfigMap != nil:
		src.ConfigMap = &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: vol.ConfigMap.Name}, Optional: vol.ConfigMap.Optional}
	case vol.Secret != nil:
		src.Secret = &corev1.SecretVolumeSource{SecretName: vol.Secret.SecretName, Optional: vol.Secret.Optional}
	case vol.DownwardAPI != nil:
		src.DownwardAPI = &corev1.DownwardAPIVolumeSource{Items: append([]corev1.DownwardAPIVolumeFile(nil), vol.DownwardAPI.Fields...)}
	case vol.Sysprep != nil && vol.Sysprep.ConfigMap != nil:
		src.ConfigMap = &corev1.ConfigMapVolumeSource{LocalObjectReference: *vol.Sysprep.ConfigMap}
	case vol.Sysprep != nil && vol.Sysprep.Secret != nil:
		src.Secret = &corev1.SecretVolumeSource{SecretName: vol.Sysprep.Secret.Name}
	case vol.ServiceAccount != nil:
		b.serviceAccount = vol.ServiceAccount.ServiceAccountName
		expiry := int64(ServiceAccountTokenSeconds)
		src.Projected = &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &expiry}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
				Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
		}}
	default:
		return
	}
	name := "config-" + shortHash(vol.Name)
	b.podVolumes = append(b.podVolumes, corev1.Volume{Name: name, VolumeSource: src})
	b.mounts = append(b.mounts, corev1.VolumeMount{Name: name, MountPath: path.Join(launcherpod.ConfigVolumesDir, vol.Name), ReadOnly: true})
}

// ServiceAccountTokenSeconds is the lifetime of the token a serviceAccount
// volume gives the guest: the kubelet's default for automounted tokens
// (the guest's copy is not refreshed, as in KubeVirt).
const ServiceAccountTokenSeconds = 3607

func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:10]
}

// args are kemu-launcher's flags (cmd/kemu-launcher). No --vmi-json: the
// node agent hands the VMI over with Sync, so the Pod spec stays small and
// never carries a stale copy.
func (b *builder) args(grace int64) []string {
	accel := "tcg"
	if b.in.KVM {
		accel = "kvm" // the node's probe passed: its plugin advertises kvm
	}
	c := launcherpod.Config{
		SocketsDir: launcherpod.SocketsDir, RuntimeDir: launcherpod.RuntimeDir, ImageCache: launcherpod.ImageCache, PVCRoot: launcherpod.PVCRoot,
		SecretsDir: launcherpod.SecretsDir, ConfigDir: launcherpod.ConfigVolumesDir, ContainerDiskDir: launcherpod.ContainerDisksDir, KernelBootDir: launcherpod.KernelBootDir,
		ImageVolumes: b.opts.ImageVolumes, Accel: accel, GracePeriod: time.Duration(grace) * time.Second,
		// The launcher reports it to the node agent (Info), which talks to
		// no launcher of another VMI; the launcher Syncs no other VMI.
		VMIUID: b.vmi.UID,
		// The downward metrics' HostName, as KubeVirt: the node's name
		// (the kubelet expands it from the container's environment).
		NodeName: "$(" + launcherpod.NodeNameEnv + ")",
	}
	return append(c.Args(), b.opts.LauncherArgs...)
}

// NeedsTun: an interface bound to the pod network or a Multus network
// (masquerade or bridge) needs a tap.
func NeedsTun(vmi *v1.VirtualMachineInstance) bool {
	pod := map[string]bool{}
	for _, n := range vmi.Spec.Networks {
		if n.Pod != nil || n.Multus != nil {
			pod[n.Name] = true
		}
	}
	for _, i := range vmi.Spec.Domain.Devices.Interfaces {
		if pod[i.Name] && (i.Masquerade != nil || i.Bridge != nil) {
			return true
		}
	}
	return false
}

// needsVhostNet: vhost-net only helps virtio NICs, and only under KVM (QEMU
// cannot use it with TCG).
func needsVhostNet(vmi *v1.VirtualMachineInstance, kvm bool) bool {
	if !kvm || !NeedsTun(vmi) {
		return false
	}
	for _, i := range vmi.Spec.Domain.Devices.Interfaces {
		if i.Model == "" || i.Model == "virtio" {
			return true
		}
	}
	return false
}

// resources: memory request = guest memory + Overhead (the limit too, when
// the VMI sets a memory limit); CPU from the VMI, else DefaultCPURequest;
// other VMI requests and limits as they are; device plugins as limits.
func (b *builder) resources() corev1.ResourceRequirements {
	vmi := b.vmi
	over := Overhead(vmi, b.in.KVM)
	req, lim := corev1.ResourceList{}, corev1.ResourceList{}
	for k, q := range vmi.Spec.Domain.Resources.Requests {
		req[k] = q.DeepCopy()
	}
	for k, q := range vmi.Spec.Domain.Resources.Limits {
		lim[k] = q.DeepCopy()
	}
	mem := resource.NewQuantity(GuestMemory(vmi), resource.BinarySI)
	if r, ok := req[corev1.ResourceMemory]; ok && r.Cmp(*mem) > 0 {
		mem = &r
	}
	mem.Add(*over)
	req[corev1.ResourceMemory] = *mem
	if l, ok := lim[corev1.ResourceMemory]; ok {
		l.Add(*over)
		lim[corev1.ResourceMemory] = l
	}
	if _, ok := req[corev1.ResourceCPU]; !ok {
		if l, ok := lim[corev1.ResourceCPU]; ok {
			req[corev1.ResourceCPU] = l.DeepCopy()
		} else {
			req[corev1.ResourceCPU] = DefaultCPURequest.DeepCopy()
		}
	}
	b.placementResources(req, lim, over)
	one := resource.MustParse("1")
	if b.in.KVM {
		lim[launcherpod.ResourceKVM] = one
	}
	if NeedsTun(vmi) {
		lim[launcherpod.ResourceTun] = one
	}
	if needsVhostNet(vmi, b.in.KVM) {
		lim[launcherpod.ResourceVhostNet] = one
	}
	// Extended resources are requested as much as limited.
	for _, k := range []corev1.ResourceName{launcherpod.ResourceKVM, launcherpod.ResourceTun, launcherpod.ResourceVhostNet} {
		if q, ok := lim[k]; ok {
			req[k] = q.DeepCopy()
		}
	}
	if len(lim) == 0 {
		lim = nil
	}
	return corev1.ResourceRequirements{Requests: req, Limits: lim}
}
