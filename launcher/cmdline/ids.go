package cmdline

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
)

// idPattern is what QEMU accepts as a device, chardev, netdev or node id.
var idPattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]*$`)

// MaxNodeName is the longest block node name QEMU accepts.
const MaxNodeName = 31

// maxNodeStem keeps "drive-"+stem and "file-"+stem within MaxNodeName.
const maxNodeStem = MaxNodeName - len("drive-")

// nodeStem is the disk name when it fits, else its first 16 characters,
// "-" and 8 hex digits of its SHA-256 (25 characters).
func nodeStem(disk string) string {
	if len(disk) <= maxNodeStem {
		return disk
	}
	sum := sha256.Sum256([]byte(disk))
	return disk[:16] + "-" + hex.EncodeToString(sum[:4])
}

// NodeName is the format node of a disk ("drive-<name>", hashed when
// longer than 31 characters): the node its guest device attaches to.
func NodeName(disk string) string { return "drive-" + nodeStem(disk) }

// FileNodeName is the protocol (file or host_device) node under NodeName.
func FileNodeName(disk string) string { return "file-" + nodeStem(disk) }

// DiskDeviceID is the QEMU device id of a disk ("ua-<name>", KubeVirt's
// user alias).
func DiskDeviceID(disk string) string { return "ua-" + disk }

// NICDeviceID is the QEMU device id of an interface's NIC.
func NICDeviceID(iface string) string { return "ua-" + iface }

// NetdevID is the id of an interface's network backend.
func NetdevID(iface string) string { return "net-" + iface }

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

	NodePflashCode     = "pflash-code"
	NodePflashCodeFile = "pflash-code-file"
	NodePflashVars     = "pflash-vars"
	NodePflashVarsFile = "pflash-vars-file"
)
