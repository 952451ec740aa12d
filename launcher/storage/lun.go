package storage

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// sgGetVersionNum is <scsi/sg.h>'s SG_GET_VERSION_NUM: the SCSI generic
// driver's version, answered by every device that takes SG_IO (sd, sr, st,
// sg) and by nothing else (ENOTTY: a loop device, device-mapper, NVMe,
// virtio-blk). golang.org/x/sys/unix does not define it.
const sgGetVersionNum = 0x2282

// minSGVersion is the oldest SG driver QEMU's scsi-block takes (its
// scsi_generic_realize refuses older ones: "scsi generic interface too
// old").
const minSGVersion = 30000

// ProbeSCSI says whether the block device at path speaks SCSI: it asks it
// for its SG version, as QEMU's scsi-block does when it starts. The device
// is opened read-only and non-blocking (no media wait), and closed.
func ProbeSCSI(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(fd)
	v, err := unix.IoctlGetInt(fd, sgGetVersionNum)
	if err != nil {
		return fmt.Errorf("%s does not speak SCSI (SG_GET_VERSION_NUM: %w)", path, err)
	}
	if v < minSGVersion {
		return fmt.Errorf("%s: SCSI generic driver version %d, QEMU needs %d or later", path, v, minSGVersion)
	}
	return nil
}

// luns checks every lun disk's volume: a block-mode claim (never an
// overlay, a file or an image) whose device speaks SCSI. Validation
// already refuses other sources; the claim's volume mode and the device
// are known only here. Errors name spec.domain.devices.disks[i].lun.
func (pr *preparer) luns() error {
	for i, d := range pr.vmi.Spec.Domain.Devices.Disks {
		if d.LUN == nil {
			continue
		}
		f := fmt.Sprintf("spec.domain.devices.disks[%d].lun", i)
		v, ok := pr.p.Volumes[d.Name]
		if !ok {
			return fieldErr(f, "no volume %q", d.Name)
		}
		if v.Kind != KindPersistentVolumeClaim || !v.Block {
			what := v.Kind
			if v.Kind == KindPersistentVolumeClaim {
				what = "a file-system persistentVolumeClaim (" + PVCDiskImage + ")"
			}
			return fieldErr(f, "volume %q is %s: a lun passes a SCSI device through and needs a block-mode persistentVolumeClaim", d.Name, what)
		}
		if err := ProbeSCSI(v.Path); err != nil {
			return fieldErr(f, "volume %q: %w; a lun needs a SCSI device (iSCSI, Fibre Channel, SAS, ...): attach anything else as a disk", d.Name, err)
		}
	}
	return nil
}
