package validation

import (
	"slices"
	"sort"
	"strings"
	"testing"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// TestValidateDownwardMetrics: a downwardMetrics volume is a virtio disk
// (KubeVirt's admitter); a cdrom, a lun or another bus is refused naming
// the field.
func TestValidateDownwardMetrics(t *testing.T) {
	with := func(d v1.Disk) func(*v1.VirtualMachineInstance) {
		return func(vmi *v1.VirtualMachineInstance) {
			d.Name = "metrics"
			vmi.Spec.Domain.Devices.Disks = append(vmi.Spec.Domain.Devices.Disks, d)
			vmi.Spec.Volumes = append(vmi.Spec.Volumes, v1.Volume{Name: "metrics", DownwardMetrics: &v1.DownwardMetricsVolumeSource{}})
		}
	}
	tests := []struct {
		name   string
		mutate func(*v1.VirtualMachineInstance)
		want   []string
		detail string
	}{
		{name: "no disk: a virtio disk is added", mutate: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Volumes = append(vmi.Spec.Volumes, v1.Volume{Name: "metrics", DownwardMetrics: &v1.DownwardMetricsVolumeSource{}})
		}},
		{name: "virtio disk with a serial", mutate: with(v1.Disk{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}, Serial: "metrics"})},
		{name: "two volumes", mutate: func(vmi *v1.VirtualMachineInstance) {
			with(v1.Disk{})(vmi)
			vmi.Spec.Volumes = append(vmi.Spec.Volumes, v1.Volume{Name: "metrics2", DownwardMetrics: &v1.DownwardMetricsVolumeSource{}})
		}},
		{name: "scsi", mutate: with(v1.Disk{Disk: &v1.DiskTarget{Bus: v1.DiskBusSCSI}}),
			want: []string{"Invalid value spec.domain.devices.disks[1].disk.bus"}, detail: "on bus virtio"},
		// Also read-only, which QEMU's ide-hd cannot be.
		{name: "sata", mutate: with(v1.Disk{Disk: &v1.DiskTarget{Bus: v1.DiskBusSATA}}),
			want: []string{"Invalid value spec.domain.devices.disks[1].disk.bus", "Invalid value spec.domain.devices.disks[1].disk.bus"}, detail: "bus virtio"},
		{name: "cdrom", mutate: with(v1.Disk{CDRom: &v1.CDRomTarget{}}),
			want: []string{"Required value spec.domain.devices.disks[1].disk"}, detail: "not a cdrom or lun"},
		{name: "lun", mutate: with(v1.Disk{LUN: &v1.LunTarget{}}),
			want: []string{"Invalid value spec.domain.devices.disks[1].lun", "Required value spec.domain.devices.disks[1].disk"}, detail: "downwardMetrics"},
		{name: "and another source", mutate: func(vmi *v1.VirtualMachineInstance) {
			vmi.Spec.Volumes[1].DownwardMetrics = &v1.DownwardMetricsVolumeSource{}
		}, want: []string{"Invalid value spec.volumes[1]"}, detail: "cloudInitNoCloud, downwardMetrics"},
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
