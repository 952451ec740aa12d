package cmdline

import (
	"fmt"
	"strconv"

	"github.com/kemu-dev/kemu/api/validation"
)

// BlockFile is a protocol node: -blockdev driver=file (or host_device for
// a block device).
type BlockFile struct {
	NodeName, Filename string
	HostDevice         bool
	ReadOnly           bool
	Discard            bool // discard=unmap: pass guest discards (TRIM) through
}

// Args implements Device.
func (b BlockFile) Args() ([]string, error) {
	if err := checkNodeName(b.NodeName); err != nil {
		return nil, err
	}
	if b.Filename == "" {
		return nil, fmt.Errorf("-blockdev %s: no filename", b.NodeName)
	}
	driver := "file"
	if b.HostDevice {
		driver = "host_device"
	}
	o := newOpts("").add("driver", driver).add("node-name", b.NodeName).add("filename", b.Filename)
	o.on("read-only", b.ReadOnly)
	if b.Discard {
		o.add("discard", "unmap")
	}
	return o.arg("-blockdev")
}

// BlockFormat is a format node (raw or qcow2) over a protocol node.
type BlockFormat struct {
	NodeName, Driver, File string
	ReadOnly               bool
	Discard                bool // discard=unmap
}

// Args implements Device.
func (b BlockFormat) Args() ([]string, error) {
	if err := checkNodeName(b.NodeName); err != nil {
		return nil, err
	}
	if b.Driver != FormatRaw && b.Driver != FormatQCOW2 {
		return nil, fmt.Errorf("-blockdev %s: format %q is neither raw nor qcow2", b.NodeName, b.Driver)
	}
	o := newOpts("").add("driver", b.Driver).add("node-name", b.NodeName).add("file", b.File)
	o.on("read-only", b.ReadOnly)
	if b.Discard {
		o.add("discard", "unmap")
	}
	return o.arg("-blockdev")
}

func checkNodeName(n string) error {
	if len(n) > MaxNodeName || !idPattern.MatchString(n) {
		return fmt.Errorf("-blockdev: bad node name %q (a letter, then letters, digits, '-', '.', '_'; at most %d)", n, MaxNodeName)
	}
	return nil
}

// BlockDisk is what every guest disk device has: its id, the format node
// it attaches, a serial and a boot index.
type BlockDisk struct {
	ID, Drive string
	Serial    string // "" = none
	BootIndex int    // 0 = none (bootOrder starts at 1)
}

func (d BlockDisk) opts(driver string) *opts {
	o := newOpts(driver).add("drive", d.Drive).add("id", d.ID).addNonEmpty("serial", d.Serial)
	if d.BootIndex > 0 {
		o.addInt("bootindex", d.BootIndex)
	}
	return o
}

// VirtioBlk is a virtio-blk-pci disk.
type VirtioBlk struct{ BlockDisk }

// Args implements Device.
func (v VirtioBlk) Args() ([]string, error) { return v.opts("virtio-blk-pci").arg("-device") }

// SCSIController is a virtio-scsi-pci controller; its bus is "<ID>.0".
type SCSIController struct{ ID string }

// Args implements Device.
func (c SCSIController) Args() ([]string, error) {
	return newOpts("virtio-scsi-pci").add("id", c.ID).arg("-device")
}

// SCSIDisk is a scsi-hd or scsi-cd at channel 0, target 0, LUN LUN of a
// virtio-scsi bus (libvirt's addressing).
type SCSIDisk struct {
	BlockDisk
	Bus   string // e.g. scsi0.0
	LUN   int
	CDROM bool
}

// Args implements Device.
func (s SCSIDisk) Args() ([]string, error) {
	driver := "scsi-hd"
	if s.CDROM {
		driver = "scsi-cd"
	}
	if s.LUN < 0 || s.LUN >= validation.MaxSCSIDisks {
		return nil, fmt.Errorf("-device %s: LUN %d out of range 0-%d", driver, s.LUN, validation.MaxSCSIDisks-1)
	}
	o := s.opts(driver).add("bus", s.Bus).add("channel", "0").add("scsi-id", "0").add("lun", strconv.Itoa(s.LUN))
	return o.arg("-device")
}

// SATAPorts is the number of ports of q35's built-in AHCI controller
// (buses ide.0 … ide.5).
const SATAPorts = validation.SATAPorts

// IDEDisk is an ide-hd or ide-cd on a port of q35's AHCI controller.
// QEMU refuses a read-only ide-hd ("Block node is read-only").
type IDEDisk struct {
	BlockDisk
	Port  int // 0 … SATAPorts-1: bus ide.<Port>
	CDROM bool
}

// Args implements Device.
func (d IDEDisk) Args() ([]string, error) {
	driver := "ide-hd"
	if d.CDROM {
		driver = "ide-cd"
	}
	if d.Port < 0 || d.Port >= SATAPorts {
		return nil, fmt.Errorf("-device %s: SATA port %d out of range 0-%d", driver, d.Port, SATAPorts-1)
	}
	return d.opts(driver).add("bus", "ide."+strconv.Itoa(d.Port)).arg("-device")
}
