package validation

import (
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// TestValidateLUN: a lun is a SCSI passthrough of a claim on bus scsi
// (defaulted), without reservations or a serial; every refusal names the
// field and says why. Whether the claim is block-mode and speaks SCSI is
// the launcher's to find out (launcher/storage).
func TestValidateLUN(t *testing.T) {
	lun := func(target v1.LunTarget, mutate ...func(*v1.Disk)) func(*v1.VirtualMachineInstance) {
		return func(vmi *v1.VirtualMachineInstance) {
			d := v1.Disk{Name: "san", LUN: &target}
			for _, m := range mutate {
				m(&d)
			}
			vmi.Spec.Domain.Devices.Disks = append(vmi.Spec.Domain.Devices.Disks, d)
			vmi.Spec.Volumes = append(vmi.Spec.Volumes, v1.Volume{Name: "san",
				PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "san-claim"}})
		}
	}
	source := func(src v1.Volume) func(*v1.VirtualMachineInstance) {
		return func(vmi *v1.VirtualMachineInstance) {
			lun(v1.LunTarget{})(vmi)
			src.Name = "san"
			vmi.Spec.Volumes[len(vmi.Spec.Volumes)-1] = src
		}
	}
	tests := []struct {
		name   string
		mutate func(*v1.VirtualMachineInstance)
		want   []string // "<error type> <field path>"
		detail string   // in every error's detail
	}{
		{name: "bus defaulted", mutate: lun(v1.LunTarget{})},
		{name: "scsi, read-only, boot order, cache, shareable", mutate: lun(v1.LunTarget{Bus: v1.DiskBusSCSI, ReadOnly: true}, func(d *v1.Disk) {
			d.BootOrder, d.Cache, d.IO, d.Shareable = ptr(uint(1)), v1.CacheNone, v1.IONative, ptr(true)
		})},
		{name: "read-only claim", mutate: func(vmi *v1.VirtualMachineInstance) {
			lun(v1.LunTarget{})(vmi)
			vmi.Spec.Volumes[len(vmi.Spec.Volumes)-1].PersistentVolumeClaim.ReadOnly = true
		}},
		{name: "virtio", mutate: lun(v1.LunTarget{Bus: v1.DiskBusVirtio}),
			want: []string{"Invalid value spec.domain.devices.disks[1].lun.bus"}, detail: "only on bus scsi"},
		{name: "sata", mutate: lun(v1.LunTarget{Bus: v1.DiskBusSATA}),
			want: []string{"Invalid value spec.domain.devices.disks[1].lun.bus"}, detail: "only on bus scsi"},
		{name: "usb", mutate: lun(v1.LunTarget{Bus: "usb"}),
			want: []string{"Unsupported value spec.domain.devices.disks[1].lun.bus"}, detail: "scsi"},
		{name: "reservation", mutate: lun(v1.LunTarget{Reservation: true}),
			want: []string{"Invalid value spec.domain.devices.disks[1].lun.reservation"}, detail: "pr-manager-helper"},
		{name: "serial", mutate: lun(v1.LunTarget{}, func(d *v1.Disk) { d.Serial = "abc" }),
			want: []string{"Invalid value spec.domain.devices.disks[1].serial"}, detail: "the SCSI device's"},
		{name: "dedicated iothread", mutate: lun(v1.LunTarget{}, func(d *v1.Disk) { d.DedicatedIOThread = ptr(true) }),
			want: []string{"Invalid value spec.domain.devices.disks[1].dedicatedIOThread"}, detail: "not a lun"},
		{name: "lun and disk", mutate: lun(v1.LunTarget{}, func(d *v1.Disk) { d.Disk = &v1.DiskTarget{Bus: v1.DiskBusSCSI} }),
			want: []string{"Invalid value spec.domain.devices.disks[1]"}, detail: "one of disk, cdrom or lun"},
		{name: "containerDisk", mutate: source(v1.Volume{ContainerDisk: &v1.ContainerDiskSource{Image: "example/os:1"}}),
			want: []string{"Invalid value spec.domain.devices.disks[1].lun"}, detail: "block-mode persistentVolumeClaim, not containerDisk"},
		{name: "ephemeral claim (an overlay)", mutate: source(v1.Volume{Ephemeral: &v1.EphemeralVolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}}),
			want: []string{"Invalid value spec.domain.devices.disks[1].lun"}, detail: "not ephemeral"},
		{name: "hostDisk", mutate: source(v1.Volume{HostDisk: &v1.HostDisk{Path: "/dev/sda", Type: v1.HostDiskExists}}),
			want: []string{"Invalid value spec.domain.devices.disks[1].lun"}, detail: "not hostDisk"},
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

// TestLUNDefaultsToSCSI: a lun without a bus gets scsi, and one with a bus
// keeps it (to be refused by validation when it is not scsi).
func TestLUNDefaultsToSCSI(t *testing.T) {
	vmi := baseVMI()
	vmi.Spec.Domain.Devices.Disks = append(vmi.Spec.Domain.Devices.Disks,
		v1.Disk{Name: "a", LUN: &v1.LunTarget{}}, v1.Disk{Name: "b", LUN: &v1.LunTarget{Bus: v1.DiskBusVirtio}})
	v1.SetVirtualMachineInstanceDefaults(vmi)
	if got := vmi.Spec.Domain.Devices.Disks[1]; got.LUN.Bus != v1.DiskBusSCSI || got.Disk != nil {
		t.Errorf("lun without bus defaulted to %+v, disk %+v; want bus scsi and no disk target", got.LUN, got.Disk)
	}
	if got := vmi.Spec.Domain.Devices.Disks[2].LUN.Bus; got != v1.DiskBusVirtio {
		t.Errorf("lun bus virtio defaulted to %q", got)
	}
}

// TestValidateLUNClaims: a lun's claim must be a block volume; a disk on
// a file-system claim is not concerned.
func TestValidateLUNClaims(t *testing.T) {
	vmi := baseVMI()
	vmi.Spec.Domain.Devices.Disks = append(vmi.Spec.Domain.Devices.Disks,
		v1.Disk{Name: "blk", LUN: &v1.LunTarget{}}, v1.Disk{Name: "fs", LUN: &v1.LunTarget{}}, v1.Disk{Name: "data"})
	for _, n := range []string{"blk", "fs", "data"} {
		vmi.Spec.Volumes = append(vmi.Spec.Volumes, v1.Volume{Name: n,
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: n + "-claim"}})
	}
	errs := ValidateLUNClaims(&vmi.Spec, map[string]bool{"blk-claim": true, "fs-claim": false, "data-claim": false})
	if got := errorKeys(errs); !slices.Equal(got, []string{"Invalid value spec.domain.devices.disks[2].lun"}) ||
		!strings.Contains(errs[0].Error(), `"fs-claim" has volumeMode Filesystem`) {
		t.Errorf("errors %v", errs)
	}
}
