package cmdline

import (
	"regexp"
	"strconv"

	"github.com/kemu-dev/kemu/api/validation"
)

// idPattern is what QEMU accepts as a device, chardev, netdev or node id.
var idPattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]*$`)

// MaxNodeName is the longest block node name QEMU accepts.
const MaxNodeName = validation.MaxNodeName

// nodeStem is the disk name when it fits, else its first 16 characters,
// "-" and 8 hex digits of its SHA-256 (25 characters): api/validation
// defines it, and refuses two disks with one stem.
func nodeStem(disk string) string { return validation.BlockNodeStem(disk) }

// NodeName is the format node of a disk ("drive-<name>", hashed when
// longer than 31 characters): the node its guest device attaches to.
func NodeName(disk string) string { return "drive-" + nodeStem(disk) }

// FileNodeName is the protocol (file or host_device) node under NodeName.
func FileNodeName(disk string) string { return "file-" + nodeStem(disk) }

// DiskDeviceID is the QEMU device id of a disk ("ua-<name>", KubeVirt's
// user alias).
func DiskDeviceID(disk string) string { return validation.QEMUDeviceID(disk) }

// NICDeviceID is the QEMU device id of an interface's NIC.
func NICDeviceID(iface string) string { return validation.QEMUDeviceID(iface) }

// NetdevID is the id of an interface's network backend.
func NetdevID(iface string) string { return "net-" + iface }

// IOThreadID is the id of iothread n (1 …, v1alpha1.PlanIOThreads'
// numbers, as libvirt's iothread ids).
func IOThreadID(n int) string { return "iothread" + strconv.Itoa(n) }

// Fixed ids.
const (
	ChardevQMP       = "qmp"
	ChardevQMPDebug  = "qmp-debug"
	ChardevSerial    = "serial0"
	ChardevAgent     = "qga0"
	VirtioSerialID   = "virtio-serial0"
	AgentPortName    = "org.qemu.guest_agent.0"
	SCSIControllerID = "scsi0"
	RNGID            = "rng0"
	BalloonID        = "balloon0"
	VideoID          = "video0"

	// BalloonQOMPath is the balloon device's QOM path (qom-get, qom-set).
	BalloonQOMPath = "/machine/peripheral/" + BalloonID

	NodePflashCode     = "pflash-code"
	NodePflashCodeFile = "pflash-code-file"
	NodePflashVars     = "pflash-vars"
	NodePflashVarsFile = "pflash-vars-file"
)

// ChardevDownwardMetrics is the downward metrics port's chardev; the port
// is downwardmetrics.PortName on the virtio-serial controller.
const ChardevDownwardMetrics = "downwardmetrics0"
