package cmdline

import (
	"fmt"
	"strconv"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/api/validation"
)

// BlockFile is a protocol node: -blockdev driver=file (or host_device for
// a block device).
type BlockFile struct {
	NodeName, Filename string
	HostDevice         bool
	ReadOnly           bool
	Discard            bool // discard=unmap: pass guest discards (TRIM) through
	Direct             bool // cache.direct=on: O_DIRECT, no host page cache
	AIO                AIO  // aio=; "" = QEMU's default (threads)
	NoLocking          bool // locking=off: no image locks (a shareable disk)
}

// AIO is a protocol node's asynchronous I/O mode.
type AIO string

// AIO modes.
const (
	AIOThreads AIO = "threads"
	AIONative  AIO = "native" // Linux AIO; QEMU requires cache.direct=on
)

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
	o.on("cache.direct", b.Direct)
	switch b.AIO {
	case "":
	case AIOThreads, AIONative:
		if b.AIO == AIONative && !b.Direct {
			return nil, fmt.Errorf("-blockdev %s: aio=native needs cache.direct=on", b.NodeName)
		}
		o.add("aio", string(b.AIO))
	default:
		return nil, fmt.Errorf("-blockdev %s: aio %q is neither threads nor native", b.NodeName, b.AIO)
	}
	if b.NoLocking {
		o.add("locking", "off")
	}
	return o.arg("-blockdev")
}

// BlockFormat is a format node (raw or qcow2) over a protocol node.
type BlockFormat struct {
	NodeName, Driver, File string
	ReadOnly               bool
	Discard                bool // discard=unmap
	Direct                 bool // cache.direct=on, as its protocol node (and a qcow2's backing file, which inherits it)
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
	o.on("cache.direct", b.Direct)
	return o.arg("-blockdev")
}

func checkNodeName(n string) error {
	if len(n) > MaxNodeName || !idPattern.MatchString(n) {
		return fmt.Errorf("-blockdev: bad node name %q (a letter, then letters, digits, '-', '.', '_'; at most %d)", n, MaxNodeName)
	}
	return nil
}

// BlockDisk is what every guest disk device has: its id, the format node
// it attaches, a serial, a boot index, the guest-visible write cache and
// whether other writers may share the node.
type BlockDisk struct {
	ID, Drive string
	Serial    string // "" = none
	BootIndex int    // 0 = none (bootOrder starts at 1)
	// WriteCache is write-cache=on: the guest is told of a volatile
	// cache and flushes it (cache none and writeback); off: every write
	// is flushed before it completes (writethrough).
	WriteCache bool
	ShareRW    bool // share-rw=on: other users may write the node (shareable)
}

func (d BlockDisk) opts(driver string) *opts {
	o := newOpts(driver).add("drive", d.Drive).add("id", d.ID).addNonEmpty("serial", d.Serial)
	if d.BootIndex > 0 {
		o.addInt("bootindex", d.BootIndex)
	}
	if d.WriteCache {
		o.add("write-cache", "on")
	} else {
		o.add("write-cache", "off")
	}
	o.on("share-rw", d.ShareRW)
	return o
}

// Cache is how a cache mode is rendered (libvirt's mapping): cache.direct
// on the block nodes and write-cache on the guest device; cache.no-flush
// is off in each of KubeVirt's modes.
type Cache struct{ Direct, WriteCache bool }

// CacheFor renders cache none (direct, write cache), writethrough
// (neither) or writeback (write cache).
func CacheFor(c v1.DriverCache) (Cache, error) {
	switch c {
	case v1.CacheNone:
		return Cache{Direct: true, WriteCache: true}, nil
	case v1.CacheWriteThrough:
		return Cache{}, nil
	case v1.CacheWriteBack:
		return Cache{WriteCache: true}, nil
	}
	return Cache{}, fmt.Errorf("cache mode %q: must be none, writethrough or writeback", c)
}

// VirtioBlk is a virtio-blk-pci disk.
type VirtioBlk struct {
	BlockDisk
	IOThread  string // the iothread object's id; "" = the main loop
	NumQueues int    // num-queues; 0 = QEMU's default
}

// Args implements Device.
func (v VirtioBlk) Args() ([]string, error) {
	o := v.opts("virtio-blk-pci").addNonEmpty("iothread", v.IOThread)
	if v.NumQueues < 0 || v.NumQueues > MaxBlockQueues {
		return nil, fmt.Errorf("-device virtio-blk-pci: num-queues %d out of range 1-%d", v.NumQueues, MaxBlockQueues)
	}
	if v.NumQueues > 0 {
		o.addInt("num-queues", v.NumQueues)
	}
	return o.arg("-device")
}

// MaxBlockQueues is virtio-blk's limit on queues (VIRTIO_QUEUE_MAX).
const MaxBlockQueues = 1024

// IOThread is a QEMU iothread (-object iothread): an event loop of its
// own for the virtio disks attached to it.
type IOThread struct{ ID string }

// Args implements Device.
func (i IOThread) Args() ([]string, error) { return newOpts("iothread").add("id", i.ID).arg("-object") }

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

// SCSIBlock is a scsi-block device: the host's SCSI device (a block
// device answering SG_IO) passed through to the guest at channel 0,
// target 0, LUN LUN of a virtio-scsi bus. QEMU sends the guest's SCSI
// commands to the device with SG_IO; the device gives its own serial,
// vendor and write cache (scsi-block has no serial or write-cache
// property).
type SCSIBlock struct {
	ID, Drive string
	Bus       string // e.g. scsi0.0
	LUN       int
	BootIndex int  // 0 = none
	ShareRW   bool // share-rw=on (shareable)
}

// Args implements Device.
func (s SCSIBlock) Args() ([]string, error) {
	if s.LUN < 0 || s.LUN >= validation.MaxSCSIDisks {
		return nil, fmt.Errorf("-device scsi-block: LUN %d out of range 0-%d", s.LUN, validation.MaxSCSIDisks-1)
	}
	o := newOpts("scsi-block").add("drive", s.Drive).add("id", s.ID).
		add("bus", s.Bus).add("channel", "0").add("scsi-id", "0").add("lun", strconv.Itoa(s.LUN))
	if s.BootIndex > 0 {
		o.addInt("bootindex", s.BootIndex)
	}
	o.on("share-rw", s.ShareRW)
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
