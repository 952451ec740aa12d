package cmdline

import (
	"fmt"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/api/validation"
)

// disks: the iothreads (v1alpha1.PlanIOThreads), then per disk a protocol
// node, a format node and a guest device. virtio → virtio-blk-pci (its
// iothread, num-queues with blockMultiQueue); scsi → scsi-hd/scsi-cd on one
// virtio-scsi controller (LUNs in disk order); sata → ide-hd/ide-cd on
// q35's AHCI ports in disk order; a lun → scsi-block on the same
// virtio-scsi controller (its volume a block device, raw).
func (b *builder) disks() {
	d := &b.vmi.Spec.Domain
	plan := v1.PlanIOThreads(&b.vmi.Spec)
	for n := 1; n <= plan.Threads; n++ {
		b.add("spec.domain.ioThreadsPolicy", IOThread{ID: IOThreadID(n)})
	}
	queues := v1.BlockQueues(d)
	for _, disk := range d.Devices.Disks {
		if disk.Disk != nil && disk.Disk.Bus == v1.DiskBusSCSI || disk.CDRom != nil && disk.CDRom.Bus == v1.DiskBusSCSI ||
			disk.LUN != nil && disk.LUN.Bus == v1.DiskBusSCSI {
			b.add("spec.domain.devices.disks", SCSIController{ID: SCSIControllerID})
			break
		}
	}
	nodes := map[string]string{} // node name -> disk name
	lun, port := 0, 0
	for i, disk := range d.Devices.Disks {
		p := fmt.Sprintf("spec.domain.devices.disks[%d]", i)
		dp := fmt.Sprintf("Input.Drives[%q]", disk.Name)
		drv, ok := b.in.Drives[disk.Name]
		if !ok {
			b.fail(p+".name", "no prepared drive for volume %q in Input.Drives", disk.Name)
			return
		}
		if drv.Path == "" {
			b.fail(dp+".Path", "empty")
		}
		if drv.Format != FormatRaw && drv.Format != FormatQCOW2 {
			b.fail(dp+".Format", "%q: must be %s or %s", drv.Format, FormatRaw, FormatQCOW2)
		}

		var bus v1.DiskBus
		cdrom, ro, roField := false, drv.ReadOnly, dp+".ReadOnly"
		switch {
		case disk.Disk != nil:
			bus = disk.Disk.Bus
			if disk.Disk.ReadOnly {
				ro, roField = true, p+".disk.readonly"
			}
		case disk.CDRom != nil:
			bus, cdrom, ro = disk.CDRom.Bus, true, true
		case disk.LUN != nil:
			bus = disk.LUN.Bus
			if disk.LUN.ReadOnly {
				ro, roField = true, p+".lun.readonly"
			}
			if !drv.Block || drv.Format != FormatRaw {
				b.fail(p+".lun", "volume %q is not a block device (%s, %s): a lun passes a SCSI device through", disk.Name, drv.Path, drv.Format)
			}
		default:
			b.fail(p, "no disk, cdrom or lun target; Build needs a defaulted VMI")
			return
		}

		file, format := FileNodeName(disk.Name), NodeName(disk.Name)
		for _, n := range []string{file, format} {
			if other, dup := nodes[n]; dup {
				b.fail(p+".name", "block node name %q is also disk %q's", n, other)
			}
			nodes[n] = disk.Name
		}
		id := DiskDeviceID(disk.Name)
		b.claimID(id, p+".name")
		cache, aio, shared := b.tuning(&disk, drv, p)
		b.add(dp,
			BlockFile{NodeName: file, Filename: b.val(dp+".Path", drv.Path), HostDevice: drv.Block, ReadOnly: ro, Discard: !ro,
				Direct: cache.Direct, AIO: aio, NoLocking: shared},
			BlockFormat{NodeName: format, Driver: drv.Format, File: file, ReadOnly: ro, Discard: !ro, Direct: cache.Direct})

		bd := BlockDisk{ID: id, Drive: format, Serial: b.val(p+".serial", disk.Serial), WriteCache: cache.WriteCache, ShareRW: shared}
		if bo := disk.BootOrder; bo != nil {
			if *bo < 1 || *bo > validation.MaxBootOrder {
				b.fail(p+".bootOrder", "%d: must be between 1 and %d (QEMU's bootindex is an int32)", *bo, validation.MaxBootOrder)
			}
			bd.BootIndex = int(*bo)
		}
		target := p + ".disk.bus"
		switch {
		case cdrom:
			target = p + ".cdrom.bus"
		case disk.LUN != nil:
			if bus != v1.DiskBusSCSI {
				b.fail(p+".lun.bus", "%q: a lun passes SCSI commands through only on scsi", bus)
			}
			if disk.Serial != "" {
				b.fail(p+".serial", "a lun has no serial of its own (scsi-block has none)")
			}
			b.add(p, SCSIBlock{ID: id, Drive: format, Bus: SCSIControllerID + ".0", LUN: lun, BootIndex: bd.BootIndex, ShareRW: shared})
			lun++
			continue
		}
		switch bus {
		case v1.DiskBusVirtio:
			if cdrom {
				b.fail(target, "a CD-ROM cannot be on virtio; use sata or scsi")
			}
			blk := VirtioBlk{BlockDisk: bd, NumQueues: queues}
			if n := plan.Disks[disk.Name]; n > 0 {
				blk.IOThread = IOThreadID(n)
			}
			b.add(p, blk)
		case v1.DiskBusSCSI:
			b.add(p, SCSIDisk{BlockDisk: bd, Bus: SCSIControllerID + ".0", LUN: lun, CDROM: cdrom})
			lun++
		case v1.DiskBusSATA:
			switch {
			case !q35Type.MatchString(d.Machine.Type):
				b.fail(target, "machine type %q has no SATA controller; use q35", d.Machine.Type)
			case ro && !cdrom:
				b.fail(roField, "QEMU cannot attach a read-only disk to SATA (ide-hd); use bus virtio or scsi")
			case port >= SATAPorts:
				b.fail(p, "more than %d SATA disks and CD-ROMs: q35's AHCI controller has %d ports", SATAPorts, SATAPorts)
			}
			b.add(p, IDEDisk{BlockDisk: bd, Port: port, CDROM: cdrom})
			port++
		default:
			b.fail(target, "%q: must be virtio, sata or scsi", bus)
		}
	}
}

// tuning applies KubeVirt's cache and io rules to a disk on this node
// (v1alpha1.DiskCache, DefaultDiskIO): the disk's cache, else none for a
// shareable disk, else none where O_DIRECT works (Drive.DirectIO) and
// writethrough elsewhere; its io, else native for a block device or a
// preallocated file with cache none, else QEMU's default (threads). Cache
// none where O_DIRECT does not work, and io native without cache none,
// are errors naming the field that asked for them (QEMU would refuse
// both). A shareable disk takes no image locks and lets others write.
func (b *builder) tuning(disk *v1.Disk, drv Drive, p string) (Cache, AIO, bool) {
	shared := disk.Shareable != nil && *disk.Shareable
	mode := v1.DiskCache(disk, drv.DirectIO)
	if mode == v1.CacheNone && !drv.DirectIO {
		f := p + ".cache"
		if disk.Cache == "" {
			f = p + ".shareable" // its cache is none
		}
		b.fail(f, "cache none opens %s with O_DIRECT, which its file system refuses; use writethrough or writeback", drv.Path)
	}
	cache, err := CacheFor(mode)
	if err != nil {
		b.fail(p+".cache", "%v", err)
	}
	var aio AIO
	switch disk.IO {
	case "":
		if v1.DefaultDiskIO(mode, drv.Block, drv.Preallocated) == v1.IONative {
			aio = AIONative
		}
	case v1.IONative:
		if mode != v1.CacheNone {
			b.fail(p+".io", "native needs cache none (O_DIRECT), and this disk's cache is %s", mode)
		}
		aio = AIONative
	case v1.IOThreads:
		aio = AIOThreads
	default:
		b.fail(p+".io", "%q: must be native or threads", disk.IO)
	}
	return cache, aio, shared
}
