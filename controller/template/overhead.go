package template

import (
	"k8s.io/apimachinery/pkg/api/resource"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// The memory overhead of one VM beyond its guest RAM, from measurements on
// this project's hardware (docs/benchmarks.md, docs/controller.md):
//
//   - launcher: 15.2 MiB RSS (4.8 MiB anonymous) with one running VM
//     serving the node agent, 5.5 MiB PSS with 83 launchers on a node
//     (issue 21) → 16 MiB;
//   - QEMU's own memory (binary, libraries, heap, device models, one vCPU
//     thread) with a 256 MiB guest booted to its ready marker: QEMU RSS
//     247.3 MiB − 128 MiB resident guest RAM − 54 MiB TCG translation
//     buffer ≈ 65 MiB → 64 MiB;
//   - TCG translation buffer: 54 MiB resident after the boot → 64 MiB, only
//     when the VM runs without KVM;
//   - each further vCPU: 8 MiB (a thread stack and, under TCG, its soft TLB;
//     KubeVirt's per-vCPU figure — not measured here);
//   - page tables / host mappings of guest RAM: guest memory / 512 (KubeVirt's
//     page-table term);
//   - EFI firmware: 8 MiB (QEMU maps OVMF_CODE_4M, 3.5 MiB, and the 528 KiB
//     variable store as pflash);
//   - the graphics device (autoattachGraphicsDevice, default on): 16 MiB,
//     the VGA device's video memory (KubeVirt's figure for it);
//   - each filesystem: its virtiofsd (QEMU 7.2's, launcher/virtiofs.go),
//     4.1 MiB RSS once the guest listed and read its share and wrote a file
//     (launcher's TestVirtiofsShares) → 16 MiB, headroom for its worker
//     threads and FUSE request buffers (up to 1 MiB each) under load;
//   - a TPM (domain.devices.tpm): its swtpm (launcher/tpm.go), 6.8 MiB RSS
//     once the guest used it (launcher's TestTPM) → 16 MiB, headroom for
//     libtpms' state and its command buffers.
const (
	LauncherOverheadBytes     = 16 << 20
	QEMUBaseOverheadBytes     = 64 << 20
	TCGOverheadBytes          = 64 << 20
	PerExtraVCPUOverheadBytes = 8 << 20
	EFIOverheadBytes          = 8 << 20
	GraphicsOverheadBytes     = 16 << 20
	VirtiofsdOverheadBytes    = 16 << 20
	SwtpmOverheadBytes        = 16 << 20
	// GuestPageTableDivisor: guest memory / GuestPageTableDivisor is added.
	GuestPageTableDivisor = 512
)

// GuestMemory returns the VMI's guest memory in bytes: memory.guest, else
// the memory limit, else the memory request (defaulting fills memory.guest;
// this covers VMIs read without it).
func GuestMemory(vmi *v1.VirtualMachineInstance) int64 {
	d := &vmi.Spec.Domain
	if d.Memory != nil && d.Memory.Guest != nil {
		return d.Memory.Guest.Value()
	}
	if q, ok := d.Resources.Limits["memory"]; ok {
		return q.Value()
	}
	if q, ok := d.Resources.Requests["memory"]; ok {
		return q.Value()
	}
	return 0
}

// VCPUs returns sockets × cores × threads (at least 1).
func VCPUs(vmi *v1.VirtualMachineInstance) int64 {
	c := vmi.Spec.Domain.CPU
	if c == nil {
		return 1
	}
	n := int64(max(c.Sockets, 1)) * int64(max(c.Cores, 1)) * int64(max(c.Threads, 1))
	return max(n, 1)
}

// Overhead returns the memory the launcher Pod needs beyond the guest's
// memory, rounded up to a whole MiB. kvm says whether the VM will run under
// KVM (no TCG translation buffer).
func Overhead(vmi *v1.VirtualMachineInstance, kvm bool) *resource.Quantity {
	b := int64(LauncherOverheadBytes + QEMUBaseOverheadBytes)
	if !kvm {
		b += TCGOverheadBytes
	}
	b += (VCPUs(vmi) - 1) * PerExtraVCPUOverheadBytes
	b += GuestMemory(vmi) / GuestPageTableDivisor
	if fw := vmi.Spec.Domain.Firmware; fw != nil && fw.Bootloader != nil && fw.Bootloader.EFI != nil {
		b += EFIOverheadBytes
	}
	if g := vmi.Spec.Domain.Devices.AutoattachGraphicsDevice; g == nil || *g {
		b += GraphicsOverheadBytes
	}
	b += int64(len(vmi.Spec.Domain.Devices.Filesystems)) * VirtiofsdOverheadBytes
	if v1.HasTPM(&vmi.Spec) {
		b += SwtpmOverheadBytes
	}
	const mi = 1 << 20
	b = (b + mi - 1) / mi * mi
	return resource.NewQuantity(b, resource.BinarySI)
}
