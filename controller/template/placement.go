package template

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// DedicatedInitCPU is the CPU request and limit of a dedicated-CPU Pod's
// init containers: a Guaranteed Pod's containers all have limits equal to
// requests, and a fraction of a CPU keeps them in the node's shared pool
// (not an exclusive CPU) without throttling a containerDisk copy to 10m.
var DedicatedInitCPU = resource.MustParse("500m")

// Dedicated says whether vmi asks for dedicated CPUs.
func Dedicated(vmi *v1.VirtualMachineInstance) bool {
	c := vmi.Spec.Domain.CPU
	return c != nil && c.DedicatedCPUPlacement
}

// DedicatedCPUs is the number of whole CPUs a dedicated-CPU launcher Pod
// asks for: one per vCPU, one more for the emulator thread with
// isolateEmulatorThread (KubeVirt's rule).
func DedicatedCPUs(vmi *v1.VirtualMachineInstance) int64 {
	n := VCPUs(vmi)
	if c := vmi.Spec.Domain.CPU; c != nil && c.IsolateEmulatorThread {
		n++
	}
	return n
}

// hugepageSize is the VMI's hugepage size ("" for none).
func hugepageSize(vmi *v1.VirtualMachineInstance) string {
	if m := vmi.Spec.Domain.Memory; m != nil && m.Hugepages != nil {
		return m.Hugepages.PageSize
	}
	return ""
}

// hugepagesVolume adds the hugetlbfs emptyDir QEMU's guest memory lives in.
func (b *builder) hugepagesVolume() {
	size := hugepageSize(b.vmi)
	if size == "" {
		return
	}
	b.podVolumes = append(b.podVolumes, corev1.Volume{Name: launcherpod.HugepagesVolume,
		VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: launcherpod.HugepagesMedium(size)}}})
	b.mounts = append(b.mounts, corev1.VolumeMount{Name: launcherpod.HugepagesVolume, MountPath: launcherpod.HugepagesDir})
}

// placementResources adjusts the compute container's resources for
// hugepages (the guest's memory is requested as hugepages-<size>, the
// memory request keeps only the overhead) and dedicated CPUs (whole CPUs,
// limits equal to requests: a Guaranteed Pod the static CPU manager gives
// exclusive CPUs).
func (b *builder) placementResources(req, lim corev1.ResourceList, over *resource.Quantity) {
	vmi := b.vmi
	if size := hugepageSize(vmi); size != "" {
		pages := *resource.NewQuantity(GuestMemory(vmi), resource.BinarySI)
		name := launcherpod.HugepagesResource(size)
		req[name], lim[name] = pages, pages.DeepCopy()
		req[corev1.ResourceMemory] = over.DeepCopy()
		if _, ok := lim[corev1.ResourceMemory]; ok {
			lim[corev1.ResourceMemory] = over.DeepCopy()
		}
	}
	if Dedicated(vmi) {
		cpus := *resource.NewQuantity(DedicatedCPUs(vmi), resource.DecimalSI)
		req[corev1.ResourceCPU], lim[corev1.ResourceCPU] = cpus, cpus.DeepCopy()
		lim[corev1.ResourceMemory] = req[corev1.ResourceMemory].DeepCopy()
	}
}

// guaranteedInit gives an init container of a dedicated-CPU Pod limits
// equal to its requests (a Guaranteed Pod's rule for every container).
func guaranteedInit(vmi *v1.VirtualMachineInstance, r corev1.ResourceRequirements) corev1.ResourceRequirements {
	if !Dedicated(vmi) {
		return r
	}
	out := *r.DeepCopy()
	out.Requests[corev1.ResourceCPU] = DedicatedInitCPU.DeepCopy()
	out.Limits[corev1.ResourceCPU] = DedicatedInitCPU.DeepCopy()
	out.Limits[corev1.ResourceMemory] = out.Requests[corev1.ResourceMemory].DeepCopy()
	return out
}
