package template

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

const mi = 1 << 20

func ptr[T any](v T) *T { return &v }

// vmi returns a defaulted VMI with a containerDisk and guest memory mem.
func vmi(mem string, mod func(*v1.VirtualMachineInstance)) *v1.VirtualMachineInstance {
	q := resource.MustParse(mem)
	x := &v1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "vm1", Namespace: "ns", UID: "uid-1", Labels: map[string]string{"app": "web"}},
		Spec: v1.VirtualMachineInstanceSpec{
			Domain: v1.DomainSpec{Memory: &v1.Memory{Guest: &q},
				Devices: v1.Devices{Disks: []v1.Disk{{Name: "root"}}}},
			Volumes: []v1.Volume{{Name: "root", ContainerDisk: &v1.ContainerDiskSource{Image: "example.com/disk:1"}}},
		},
	}
	if mod != nil {
		mod(x)
	}
	v1.SetVirtualMachineInstanceDefaults(x)
	return x
}

func TestOverhead(t *testing.T) {
	for _, tc := range []struct {
		name string
		vmi  *v1.VirtualMachineInstance
		kvm  bool
		want int64 // MiB
	}{
		// 16 launcher + 64 QEMU + 64 TCG + 256/512 + 16 graphics → 160.5 → 161.
		{"tcg-256Mi", vmi("256Mi", nil), false, 161},
		{"kvm-256Mi", vmi("256Mi", nil), true, 97},
		// Without the graphics device: 16 MiB less.
		{"tcg-256Mi-no-graphics", vmi("256Mi", func(x *v1.VirtualMachineInstance) {
			x.Spec.Domain.Devices.AutoattachGraphicsDevice = new(bool)
		}), false, 145},
		{"kvm-256Mi-no-graphics", vmi("256Mi", func(x *v1.VirtualMachineInstance) {
			x.Spec.Domain.Devices.AutoattachGraphicsDevice = new(bool)
		}), true, 81},
		// 1 GiB guest: +2 MiB page tables.
		{"kvm-1Gi", vmi("1Gi", nil), true, 98},
		// 4 vCPUs: 3 × 8 MiB more.
		{"kvm-4vcpu", vmi("1Gi", func(x *v1.VirtualMachineInstance) {
			x.Spec.Domain.CPU = &v1.CPU{Sockets: 1, Cores: 2, Threads: 2}
		}), true, 98 + 24},
		{"kvm-efi", vmi("1Gi", func(x *v1.VirtualMachineInstance) {
			x.Spec.Domain.Firmware = &v1.Firmware{Bootloader: &v1.Bootloader{EFI: &v1.EFI{}}}
		}), true, 98 + 8},
		// Two filesystems: 2 × 16 MiB of virtiofsd.
		{"kvm-2fs", vmi("1Gi", func(x *v1.VirtualMachineInstance) {
			x.Spec.Domain.Devices.Filesystems = []v1.Filesystem{{Name: "a"}, {Name: "b"}}
		}), true, 98 + 32},
		// A TPM: 16 MiB of swtpm; none when disabled.
		{"kvm-tpm", vmi("1Gi", func(x *v1.VirtualMachineInstance) {
			x.Spec.Domain.Devices.TPM = &v1.TPMDevice{}
		}), true, 98 + 16},
		{"kvm-tpm-disabled", vmi("1Gi", func(x *v1.VirtualMachineInstance) {
			x.Spec.Domain.Devices.TPM = &v1.TPMDevice{Enabled: new(bool)}
		}), true, 98},
		// 16 GiB: 32 MiB of page tables.
		{"tcg-16Gi", vmi("16Gi", nil), false, 160 + 32},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Overhead(tc.vmi, tc.kvm)
			if got.Value() != tc.want*mi {
				t.Fatalf("Overhead = %s (%d MiB), want %d MiB", got, got.Value()/mi, tc.want)
			}
		})
	}
}

func env(c corev1.Container) map[string]corev1.VolumeMount {
	m := map[string]corev1.VolumeMount{}
	for _, vm := range c.VolumeMounts {
		m[vm.MountPath] = vm
	}
	return m
}

func TestRender(t *testing.T) {
	svc := NewService(Options{LauncherImage: "kemu.local/launcher:1", LauncherPullPolicy: corev1.PullIfNotPresent, HostDiskDirs: []string{"/var/lib/vms"}})
	q := func(s string) resource.Quantity { return resource.MustParse(s) }
	for _, tc := range []struct {
		name  string
		in    Input
		check func(t *testing.T, pod *corev1.Pod)
	}{
		{"basics", Input{VMI: vmi("256Mi", nil)}, func(t *testing.T, pod *corev1.Pod) {
			if !strings.HasPrefix(pod.Name, "kemu-launcher-vm1-") || pod.Namespace != "ns" {
				t.Errorf("name %s/%s", pod.Namespace, pod.Name)
			}
			for k, v := range map[string]string{launcherpod.AppLabel: launcherpod.AppLauncher, launcherpod.CreatedByLabel: "uid-1", launcherpod.VMINameLabel: "vm1", "app": "web"} {
				if pod.Labels[k] != v {
					t.Errorf("label %s = %q, want %q", k, pod.Labels[k], v)
				}
			}
			ref := metav1.GetControllerOf(pod)
			if ref == nil || ref.UID != "uid-1" || ref.Kind != "VirtualMachineInstance" || ref.APIVersion != "kemu.dev/v1alpha1" || !*ref.BlockOwnerDeletion {
				t.Errorf("owner %+v", ref)
			}
			if pod.Spec.NodeSelector[v1.NodeSchedulableLabel] != "true" || len(pod.Spec.NodeSelector) != 1 {
				t.Errorf("nodeSelector %v, want only schedulable (q35 is in every QEMU)", pod.Spec.NodeSelector)
			}
			if *pod.Spec.TerminationGracePeriodSeconds != 30+GracePeriodPadding {
				t.Errorf("grace %d", *pod.Spec.TerminationGracePeriodSeconds)
			}
			if pod.Spec.RestartPolicy != corev1.RestartPolicyNever || *pod.Spec.AutomountServiceAccountToken {
				t.Errorf("restart %s automount %v", pod.Spec.RestartPolicy, *pod.Spec.AutomountServiceAccountToken)
			}
			c := pod.Spec.Containers[0]
			wantArgs := []string{"--sockets-dir=/var/run/kemu/sockets", "--runtime-dir=/var/run/kemu/private/vm",
				"--image-cache=/var/lib/kemu/images", "--pvc-root=/var/run/kemu/pvcs", "--secrets-dir=/var/run/kemu/secrets", "--config-dir=/var/run/kemu/config",
				"--container-disk-dir=/var/run/kemu/container-disks", "--kernel-boot-dir=/var/run/kemu/kernel-boot", "--image-volumes=false", "--accel=tcg", "--grace-period=30s",
				"--vmi-uid=uid-1", "--allow-raw-qmp=false", "--node-name=$(KEMU_NODE_NAME)"}
			if len(c.Env) != 1 || c.Env[0].Name != launcherpod.NodeNameEnv || c.Env[0].ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
				t.Errorf("compute env %+v, want only %s from spec.nodeName", c.Env, launcherpod.NodeNameEnv)
			}
			if c.Name != launcherpod.ComputeContainer || c.Image != "kemu.local/launcher:1" || !slices.Equal(c.Command, []string{"kemu-launcher"}) || !slices.Equal(c.Args, wantArgs) {
				t.Errorf("compute %s %s %v %v", c.Name, c.Image, c.Command, c.Args)
			}
			// 256 MiB guest + 161 MiB TCG overhead (with graphics); default CPU; tun for the default masquerade interface.
			r := c.Resources
			if m := r.Requests[corev1.ResourceMemory]; m.Value() != (256+161)*mi {
				t.Errorf("memory request %s", &m)
			}
			if _, ok := r.Limits[corev1.ResourceMemory]; ok {
				t.Errorf("memory limit without a VMI limit: %v", r.Limits)
			}
			if cpu := r.Requests[corev1.ResourceCPU]; cpu.Cmp(q("100m")) != 0 {
				t.Errorf("cpu %s", &cpu)
			}
			if tun := r.Limits[launcherpod.ResourceTun]; tun.Value() != 1 || r.Requests[launcherpod.ResourceTun] != tun {
				t.Errorf("tun %v / %v", r.Limits, r.Requests)
			}
			for _, res := range []corev1.ResourceName{launcherpod.ResourceKVM, launcherpod.ResourceVhostNet} {
				if _, ok := r.Limits[res]; ok {
					t.Errorf("%s requested under TCG", res)
				}
			}
			m := env(c)
			if m[launcherpod.SocketsDir].Name != launcherpod.SocketsVolume || m[launcherpod.PrivateDir].Name != launcherpod.PrivateVolume || m[launcherpod.ImageCache].Name != launcherpod.ImagesVolume {
				t.Errorf("mounts %v", c.VolumeMounts)
			}
			if cd := m[launcherpod.ContainerDisksDir+"/root"]; cd.Name != "container-disk-0" || !cd.ReadOnly {
				t.Errorf("containerDisk mount %+v", cd)
			}
			// containerDisk: install kemu-copy, then copy /disk out of the image.
			ic := pod.Spec.InitContainers
			if len(ic) != 2 || ic[0].Image != "kemu.local/launcher:1" || !slices.Equal(ic[0].Command, []string{launcherpod.CopyBinary, launcherpod.CopyBinary, launcherpod.ToolsDir}) {
				t.Fatalf("init containers %+v", ic)
			}
			if ic[1].Image != "example.com/disk:1" || ic[1].ImagePullPolicy != corev1.PullIfNotPresent ||
				!slices.Equal(ic[1].Command, []string{launcherpod.ToolsDir + "/kemu-copy", "/disk", launcherpod.ContainerDisksDir + "/root"}) {
				t.Errorf("disk init container %+v", ic[1])
			}
			var sockets bool
			for _, v := range pod.Spec.Volumes {
				sockets = sockets || (v.Name == "sockets" && v.EmptyDir != nil)
			}
			if !sockets {
				t.Errorf("no sockets emptyDir: %v", pod.Spec.Volumes)
			}
		}},
		{"kernel-boot", Input{VMI: vmi("256Mi", func(x *v1.VirtualMachineInstance) {
			x.Spec.Volumes, x.Spec.Domain.Devices.Disks = nil, nil
			x.Spec.Domain.Firmware = &v1.Firmware{KernelBoot: &v1.KernelBoot{Container: &v1.KernelBootContainer{
				Image: "example.com/kernel:1", KernelPath: "/boot/vmlinuz", InitrdPath: "/boot/initrd.img"}}}
		})}, func(t *testing.T, pod *corev1.Pod) {
			// No containerDisk: kemu-copy is installed for the kernel alone.
			ic := pod.Spec.InitContainers
			if len(ic) != 2 || !slices.Equal(ic[0].Command, []string{launcherpod.CopyBinary, launcherpod.CopyBinary, launcherpod.ToolsDir}) {
				t.Fatalf("init containers %+v", ic)
			}
			if ic[1].Image != "example.com/kernel:1" || ic[1].ImagePullPolicy != corev1.PullIfNotPresent ||
				!slices.Equal(ic[1].Command, []string{launcherpod.ToolsDir + "/kemu-copy", "/boot/vmlinuz", "/boot/initrd.img", launcherpod.KernelBootDir}) {
				t.Errorf("kernel init container %+v", ic[1])
			}
			if m := env(pod.Spec.Containers[0]); m[launcherpod.KernelBootDir].Name != launcherpod.KernelBootVolume || !m[launcherpod.KernelBootDir].ReadOnly {
				t.Errorf("kernel-boot mount %+v", m[launcherpod.KernelBootDir])
			}
		}},
		{"kvm-limits-selectors", Input{KVM: true, VMI: vmi("1Gi", func(x *v1.VirtualMachineInstance) {
			x.Spec.Domain.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: q("2Gi"), corev1.ResourceCPU: q("2")}
			x.Spec.NodeSelector = map[string]string{"zone": "a"}
			x.Spec.Domain.Machine = &v1.Machine{Type: "pc-q35-10.0"}
			x.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "vms", Effect: corev1.TaintEffectNoSchedule}}
			x.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{}}
			x.Spec.TerminationGracePeriodSeconds = ptr(int64(120))
			x.Spec.Domain.Memory.Guest = nil // from the limit
		})}, func(t *testing.T, pod *corev1.Pod) {
			r := pod.Spec.Containers[0].Resources
			if m := r.Requests[corev1.ResourceMemory]; m.Value() != 2048*mi+100*mi { // 84 MiB + 16 MiB graphics
				t.Errorf("memory request %s", &m)
			}
			if m := r.Limits[corev1.ResourceMemory]; m.Value() != 2048*mi+100*mi { // 84 MiB + 16 MiB graphics
				t.Errorf("memory limit %s", &m)
			}
			if cpu := r.Requests[corev1.ResourceCPU]; cpu.Cmp(q("2")) != 0 {
				t.Errorf("cpu request %s (from the limit)", &cpu)
			}
			for _, res := range []corev1.ResourceName{launcherpod.ResourceKVM, launcherpod.ResourceTun, launcherpod.ResourceVhostNet} {
				if l := r.Limits[res]; l.Value() != 1 {
					t.Errorf("%s not requested: %v", res, r.Limits)
				}
			}
			if !slices.Contains(pod.Spec.Containers[0].Args, "--accel=kvm") || !slices.Contains(pod.Spec.Containers[0].Args, "--grace-period=2m0s") {
				t.Errorf("args %v", pod.Spec.Containers[0].Args)
			}
			if pod.Spec.NodeSelector["zone"] != "a" || pod.Spec.NodeSelector[v1.NodeSchedulableLabel] != "true" ||
				pod.Spec.NodeSelector[v1.NodeMachineTypeLabelPrefix+"pc-q35-10.0"] != "true" || len(pod.Spec.NodeSelector) != 3 {
				t.Errorf("nodeSelector %v, want zone, schedulable and the machine type", pod.Spec.NodeSelector)
			}
			if len(pod.Spec.Tolerations) != 1 || pod.Spec.Tolerations[0].Key != "dedicated" || pod.Spec.Affinity.PodAntiAffinity == nil {
				t.Errorf("tolerations %v affinity %v", pod.Spec.Tolerations, pod.Spec.Affinity)
			}
			if *pod.Spec.TerminationGracePeriodSeconds != 135 {
				t.Errorf("grace %d", *pod.Spec.TerminationGracePeriodSeconds)
			}
		}},
		{"ephemeral-claims", Input{PVCBlock: map[string]bool{"blk": true}, VMI: vmi("256Mi", func(x *v1.VirtualMachineInstance) {
			eph := func(claim string) *v1.EphemeralVolumeSource {
				return &v1.EphemeralVolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}
			}
			x.Spec.Domain.Devices.Disks = []v1.Disk{{Name: "e1"}, {Name: "e2"}, {Name: "e3"}, {Name: "rw"}}
			x.Spec.Volumes = []v1.Volume{
				{Name: "e1", Ephemeral: eph("golden")},
				{Name: "e2", Ephemeral: eph("blk")},
				// The same claim under an overlay and written directly: writable.
				{Name: "e3", Ephemeral: eph("shared")},
				{Name: "rw", PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "shared"}},
			}
		})}, func(t *testing.T, pod *corev1.Pod) {
			c := pod.Spec.Containers[0]
			m := env(c)
			byName := map[string]corev1.Volume{}
			for _, v := range pod.Spec.Volumes {
				byName[v.Name] = v
			}
			golden := m[launcherpod.PVCRoot+"/golden"]
			if golden.Name == "" || !golden.ReadOnly || !byName[golden.Name].PersistentVolumeClaim.ReadOnly ||
				byName[golden.Name].PersistentVolumeClaim.ClaimName != "golden" {
				t.Errorf("ephemeral claim: mount %+v, volume %+v", golden, byName[golden.Name])
			}
			if len(c.VolumeDevices) != 1 || c.VolumeDevices[0].DevicePath != launcherpod.PVCRoot+"/blk" ||
				!byName[c.VolumeDevices[0].Name].PersistentVolumeClaim.ReadOnly {
				t.Errorf("ephemeral block claim %+v", c.VolumeDevices)
			}
			shared := m[launcherpod.PVCRoot+"/shared"]
			if shared.Name == "" || shared.ReadOnly || byName[shared.Name].PersistentVolumeClaim.ReadOnly {
				t.Errorf("claim used writable and under an overlay: mount %+v, volume %+v", shared, byName[shared.Name])
			}
			n := 0
			for _, v := range pod.Spec.Volumes {
				if v.PersistentVolumeClaim != nil {
					n++
				}
			}
			if n != 3 {
				t.Errorf("%d claim volumes, want 3: %+v", n, pod.Spec.Volumes)
			}
		}},
		{"no-network-no-tun", Input{VMI: vmi("256Mi", func(x *v1.VirtualMachineInstance) {
			x.Spec.Domain.Devices.AutoattachPodInterface = ptr(false)
		})}, func(t *testing.T, pod *corev1.Pod) {
			if _, ok := pod.Spec.Containers[0].Resources.Limits[launcherpod.ResourceTun]; ok {
				t.Error("tun requested without interfaces")
			}
		}},
		{"pvc-hostdisk-secret", Input{PVCBlock: map[string]bool{"blk": true, "imported-blk": true}, VMI: vmi("256Mi", func(x *v1.VirtualMachineInstance) {
			x.Spec.Domain.Devices.Disks = []v1.Disk{{Name: "fs"}, {Name: "blk"}, {Name: "host"}, {Name: "host2"}, {Name: "ci"}, {Name: "dv"}, {Name: "dvblk"}}
			x.Spec.Volumes = []v1.Volume{
				{Name: "fs", PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data", ReadOnly: true}},
				{Name: "blk", PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "blk"}},
				{Name: "host", HostDisk: &v1.HostDisk{Path: "/var/lib/vms/team/a.img", Type: v1.HostDiskExistsOrCreate, Capacity: ptr(q("1Gi"))}},
				{Name: "host2", HostDisk: &v1.HostDisk{Path: "/var/lib/vms/b.img", Type: v1.HostDiskExists}},
				{Name: "ci", CloudInitNoCloud: &v1.CloudInitNoCloudSource{SecretRef: &corev1.LocalObjectReference{Name: "userdata"}}},
				{Name: "dv", DataVolume: &v1.DataVolumeSource{Name: "imported"}},
				{Name: "dvblk", DataVolume: &v1.DataVolumeSource{Name: "imported-blk"}},
			}
		})}, func(t *testing.T, pod *corev1.Pod) {
			c := pod.Spec.Containers[0]
			m := env(c)
			if fs := m[launcherpod.PVCRoot+"/data"]; fs.Name == "" || !fs.ReadOnly {
				t.Errorf("file-system claim mount %+v", fs)
			}
			// A dataVolume is the claim of its name, read-write, like a
			// persistentVolumeClaim.
			if dv := m[launcherpod.PVCRoot+"/imported"]; dv.Name == "" || dv.ReadOnly {
				t.Errorf("dataVolume's file-system claim mount %+v", dv)
			}
			if len(c.VolumeDevices) != 2 || c.VolumeDevices[0].DevicePath != launcherpod.PVCRoot+"/blk" ||
				c.VolumeDevices[1].DevicePath != launcherpod.PVCRoot+"/imported-blk" {
				t.Errorf("block claims %+v", c.VolumeDevices)
			}
			if m["/var/lib/vms"].Name == "" || m[launcherpod.SecretsDir+"/userdata"].Name == "" {
				t.Errorf("mounts %+v", c.VolumeMounts)
			}
			if len(pod.Spec.InitContainers) != 0 {
				t.Errorf("init containers without containerDisks: %v", pod.Spec.InitContainers)
			}
			byName := map[string]corev1.Volume{}
			for _, v := range pod.Spec.Volumes {
				byName[v.Name] = v
			}
			for _, vm := range c.VolumeMounts {
				if _, ok := byName[vm.Name]; !ok {
					t.Errorf("mount %s has no volume", vm.Name)
				}
			}
			// DiskOrCreate: the allowed directory itself; Disk: only the file.
			h := byName[m["/var/lib/vms"].Name].HostPath
			if h == nil || h.Path != "/var/lib/vms" || *h.Type != corev1.HostPathDirectory {
				t.Errorf("hostPath %+v", h)
			}
			h2 := byName[m["/var/lib/vms/b.img"].Name].HostPath
			if h2 == nil || h2.Path != "/var/lib/vms/b.img" || *h2.Type != corev1.HostPathFile {
				t.Errorf("hostPath of the Disk %+v", h2)
			}
			for _, v := range pod.Spec.Volumes {
				if hp := v.HostPath; hp != nil && hp.Path != "/var/lib/vms" && hp.Path != "/var/lib/vms/b.img" {
					t.Errorf("host path %s mounted", hp.Path)
				}
			}
			if cl := byName[c.VolumeDevices[0].Name].PersistentVolumeClaim; cl == nil || cl.ClaimName != "blk" {
				t.Errorf("block claim volume %+v", cl)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod, err := svc.Render(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, pod)
		})
	}
}

// With ImageVolumes the containerDisk and kernel-boot images are the
// compute container's read-only image volumes: no init container, no copy.
func TestRenderImageVolumes(t *testing.T) {
	svc := NewService(Options{LauncherImage: "kemu.local/launcher:1", ImageVolumes: true})
	x := vmi("256Mi", func(x *v1.VirtualMachineInstance) {
		x.Spec.Volumes[0].ContainerDisk.Path = "/disk/x.qcow2"
		x.Spec.Domain.Firmware = &v1.Firmware{KernelBoot: &v1.KernelBoot{Container: &v1.KernelBootContainer{
			Image: "example.com/kernel:latest", KernelPath: "/boot/vmlinuz"}}}
	})
	pod, err := svc.Render(Input{VMI: x})
	if err != nil {
		t.Fatal(err)
	}
	if ic := pod.Spec.InitContainers; len(ic) != 0 {
		t.Errorf("init containers with image volumes: %+v", ic)
	}
	c := pod.Spec.Containers[0]
	if !slices.Contains(c.Args, "--image-volumes=true") {
		t.Errorf("launcher args %v", c.Args)
	}
	m := env(c)
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		vols[v.Name] = v
	}
	for _, tc := range []struct {
		mount, image string
		pull         corev1.PullPolicy
	}{
		{launcherpod.ContainerDisksDir + "/root", "example.com/disk:1", corev1.PullIfNotPresent},
		{launcherpod.KernelBootDir, "example.com/kernel:latest", corev1.PullAlways},
	} {
		mnt, ok := m[tc.mount]
		if !ok || !mnt.ReadOnly {
			t.Errorf("mount %s: %+v", tc.mount, mnt)
			continue
		}
		if iv := vols[mnt.Name].Image; iv == nil || iv.Reference != tc.image || iv.PullPolicy != tc.pull {
			t.Errorf("volume %s: %+v, want image %s pull %s", mnt.Name, vols[mnt.Name], tc.image, tc.pull)
		}
	}
	if _, ok := vols[launcherpod.ToolsVolume]; ok {
		t.Error("the kemu-copy tools volume with image volumes")
	}
}

func TestRenderErrors(t *testing.T) {
	if _, err := NewService(Options{}).Render(Input{VMI: vmi("256Mi", nil)}); err == nil {
		t.Error("no launcher image must fail")
	}
	x := vmi("256Mi", nil)
	x.UID = ""
	if _, err := NewService(Options{LauncherImage: "l"}).Render(Input{VMI: x}); err == nil {
		t.Error("no UID must fail")
	}
	for _, dirs := range [][]string{nil, {"/var/lib/vms"}} {
		h := vmi("256Mi", func(x *v1.VirtualMachineInstance) {
			x.Spec.Volumes = []v1.Volume{{Name: "h", HostDisk: &v1.HostDisk{Path: "/etc/shadow", Type: v1.HostDiskExists}}}
		})
		if _, err := NewService(Options{LauncherImage: "l", HostDiskDirs: dirs}).Render(Input{VMI: h}); err == nil {
			t.Errorf("hostDisk /etc/shadow rendered with allowed dirs %v", dirs)
		}
	}
}

func TestPodName(t *testing.T) {
	a, b := vmi("256Mi", nil), vmi("256Mi", nil)
	if launcherpod.PodName(a) != launcherpod.PodName(b) {
		t.Error("the same VMI must give the same Pod name")
	}
	b.UID = "uid-2"
	if launcherpod.PodName(a) == launcherpod.PodName(b) {
		t.Error("a VMI recreated with the same name must get another Pod name")
	}
}

func TestComputeSecurityContext(t *testing.T) {
	pod, err := NewService(Options{LauncherImage: "l"}).Render(Input{VMI: vmi("256Mi", nil)})
	if err != nil {
		t.Fatal(err)
	}
	sc := pod.Spec.Containers[0].SecurityContext
	if sc == nil || sc.Privileged != nil || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Fatalf("security context %+v: want every capability dropped but the launcher's", sc)
	}
	if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("seccomp %+v, want RuntimeDefault", sc.SeccompProfile)
	}
	for _, c := range sc.Capabilities.Add {
		if c == "SYS_RESOURCE" || c == "SYS_PTRACE" || c == "SYS_MODULE" || c == "MKNOD" || c == "SYS_CHROOT" {
			t.Errorf("capability %s added", c)
		}
	}
	// A VMI with a filesystem: SYS_CHROOT too (virtiofsd's chroot under
	// RuntimeDefault seccomp), and nothing else more.
	pod, err = NewService(Options{LauncherImage: "l"}).Render(Input{VMI: vmi("256Mi", func(x *v1.VirtualMachineInstance) {
		x.Spec.Volumes = append(x.Spec.Volumes, v1.Volume{Name: "cm", ConfigMap: &v1.ConfigMapVolumeSource{Name: "app"}})
		x.Spec.Domain.Devices.Filesystems = []v1.Filesystem{{Name: "cm", Virtiofs: &v1.FilesystemVirtiofs{}}}
	})})
	if err != nil {
		t.Fatal(err)
	}
	got := pod.Spec.Containers[0].SecurityContext.Capabilities.Add
	if want := append(append([]corev1.Capability(nil), launcherpod.Capabilities...), "SYS_CHROOT"); !slices.Equal(got, want) {
		t.Errorf("capabilities with a filesystem %v, want %v", got, want)
	}
}
