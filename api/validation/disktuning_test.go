package validation

import (
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// TestValidateDiskTuning: iothreads, cache, io and shareable (KubeVirt's
// rules and what QEMU refuses) and ephemeral volumes, each error on the
// field at fault and saying why.
func TestValidateDiskTuning(t *testing.T) {
	disk := func(mutate func(*v1.Disk)) func(*v1.VirtualMachineInstance) {
		return func(vmi *v1.VirtualMachineInstance) { mutate(&vmi.Spec.Domain.Devices.Disks[0]) }
	}
	tests := []struct {
		name   string
		mutate func(*v1.VirtualMachineInstance)
		want   []string // "<error type> <field path>"
		detail string   // in every error's detail
	}{
		{name: "every cache and io", mutate: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Disks = []v1.Disk{
				{Name: "root", Cache: v1.CacheNone, IO: v1.IONative},
				{Name: "ci", Cache: v1.CacheWriteThrough, IO: v1.IOThreads, Disk: &v1.DiskTarget{Bus: v1.DiskBusSCSI}},
				{Name: "data", Cache: v1.CacheWriteBack, Disk: &v1.DiskTarget{Bus: v1.DiskBusSATA}},
			}
			vmi.Spec.Volumes = append(vmi.Spec.Volumes, v1.Volume{Name: "data", HostDisk: &v1.HostDisk{Path: "/d.img", Type: v1.HostDiskExists}})
		}},
		{name: "io native with cache unset (decided on the node)", mutate: disk(func(d *v1.Disk) { d.IO = v1.IONative })},
		{name: "shareable, cache unset (none)", mutate: disk(func(d *v1.Disk) { d.Shareable = ptr(true) })},
		{name: "shareable with cache none and io native", mutate: disk(func(d *v1.Disk) {
			d.Shareable, d.Cache, d.IO = ptr(true), v1.CacheNone, v1.IONative
		})},
		{name: "not shareable, any cache", mutate: disk(func(d *v1.Disk) { d.Shareable, d.Cache = ptr(false), v1.CacheWriteBack })},
		{name: "shareable CD-ROM", mutate: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Disks = append(vmi.Spec.Domain.Devices.Disks, v1.Disk{Name: "ci", CDRom: &v1.CDRomTarget{}, Shareable: ptr(true)})
		}},
		{name: "iothreads: policies, dedicated virtio disks", mutate: func(vmi *v1.VirtualMachineInstance) {
			p := v1.IOThreadsPolicyAuto
			vmi.Spec.Domain.IOThreadsPolicy = &p
			vmi.Spec.Domain.Devices.Disks[0].DedicatedIOThread = ptr(true)
			vmi.Spec.Domain.Devices.BlockMultiQueue = ptr(true)
		}},
		{name: "dedicated iothread on SCSI", mutate: disk(func(d *v1.Disk) {
			d.DedicatedIOThread, d.Disk = ptr(true), &v1.DiskTarget{Bus: v1.DiskBusSCSI}
		}), want: []string{"Invalid value spec.domain.devices.disks[0].dedicatedIOThread"}, detail: "only for virtio disks, not a disk on bus scsi"},
		{name: "dedicated iothread on a CD-ROM", mutate: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Disks = append(vmi.Spec.Domain.Devices.Disks, v1.Disk{Name: "ci", CDRom: &v1.CDRomTarget{}, DedicatedIOThread: ptr(true)})
		}, want: []string{"Invalid value spec.domain.devices.disks[1].dedicatedIOThread"}, detail: "not a CD-ROM"},
		{name: "dedicated iothread false on SATA", mutate: disk(func(d *v1.Disk) {
			d.DedicatedIOThread, d.Disk = ptr(false), &v1.DiskTarget{Bus: v1.DiskBusSATA}
		})},
		{name: "supplementalPool", mutate: func(vmi *v1.VirtualMachineInstance) {
			p := v1.IOThreadsPolicySupplementalPool
			vmi.Spec.Domain.IOThreadsPolicy = &p
		}, want: []string{"Invalid value spec.domain.ioThreadsPolicy"}, detail: "supplementalPool is not supported by kemu"},
		{name: "unknown policy", mutate: func(vmi *v1.VirtualMachineInstance) {
			p := v1.IOThreadsPolicy("dedicated")
			vmi.Spec.Domain.IOThreadsPolicy = &p
		}, want: []string{"Unsupported value spec.domain.ioThreadsPolicy"}, detail: "auto"},
		{name: "ephemeral volume", mutate: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Volumes[0] = v1.Volume{Name: "root", Ephemeral: &v1.EphemeralVolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "golden-image"}}}
		}},
		{name: "ephemeral on SATA (the overlay is writable)", mutate: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Domain.Devices.Disks[0].Disk = &v1.DiskTarget{Bus: v1.DiskBusSATA}
			vmi.Spec.Volumes[0] = v1.Volume{Name: "root", Ephemeral: &v1.EphemeralVolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "golden-image", ReadOnly: true}}}
		}},
		{name: "ephemeral without a claim", mutate: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Volumes[0] = v1.Volume{Name: "root", Ephemeral: &v1.EphemeralVolumeSource{}}
		}, want: []string{"Required value spec.volumes[0].ephemeral.persistentVolumeClaim"}, detail: "throw-away overlay"},
		{name: "ephemeral with a bad claim name", mutate: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Volumes[0] = v1.Volume{Name: "root", Ephemeral: &v1.EphemeralVolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "Bad_Name"}}}
		}, want: []string{"Invalid value spec.volumes[0].ephemeral.persistentVolumeClaim.claimName"}, detail: "lowercase"},
		{name: "ephemeral and a PVC in one volume", mutate: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Volumes[0] = v1.Volume{Name: "root", Ephemeral: &v1.EphemeralVolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "a"}},
				PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "a"}}
		}, want: []string{"Invalid value spec.volumes[0]"}, detail: "persistentVolumeClaim, ephemeral"},
		{name: "unknown cache", mutate: disk(func(d *v1.Disk) { d.Cache = "unsafe" }),
			want: []string{"Unsupported value spec.domain.devices.disks[0].cache"}, detail: "writethrough"},
		{name: "unknown io", mutate: disk(func(d *v1.Disk) { d.IO = "io_uring" }),
			want: []string{"Unsupported value spec.domain.devices.disks[0].io"}, detail: "threads"},
		{name: "io native with writethrough", mutate: disk(func(d *v1.Disk) { d.IO, d.Cache = v1.IONative, v1.CacheWriteThrough }),
			want: []string{"Invalid value spec.domain.devices.disks[0].io"}, detail: "native needs cache none"},
		{name: "io native with writeback", mutate: disk(func(d *v1.Disk) { d.IO, d.Cache = v1.IONative, v1.CacheWriteBack }),
			want: []string{"Invalid value spec.domain.devices.disks[0].io"}, detail: "native needs cache none"},
		{name: "shareable with writeback", mutate: disk(func(d *v1.Disk) { d.Shareable, d.Cache = ptr(true), v1.CacheWriteBack }),
			want: []string{"Invalid value spec.domain.devices.disks[0].cache"}, detail: "shareable disk needs cache none"},
		{name: "shareable with writethrough", mutate: disk(func(d *v1.Disk) { d.Shareable, d.Cache = ptr(true), v1.CacheWriteThrough }),
			want: []string{"Invalid value spec.domain.devices.disks[0].cache"}, detail: "shareable disk needs cache none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmi := baseVMI()
			tt.mutate(vmi)
			v1.SetVirtualMachineInstanceDefaults(vmi)
			errs := ValidateVirtualMachineInstance(vmi)
			want := slices.Clone(tt.want)
			sort.Strings(want)
			if got := errorKeys(errs); !slices.Equal(got, want) {
				t.Fatalf("errors:\n got  %q\n want %q\nfull: %v", got, want, errs)
			}
			for _, e := range errs {
				if !strings.Contains(e.Error(), tt.detail) {
					t.Errorf("%q does not say %q", e.Error(), tt.detail)
				}
			}
		})
	}
}
