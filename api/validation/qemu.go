package validation

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Facts about the launcher's QEMU (7.2, x86_64) and the kernel it runs on.
// Validation refuses what QEMU (or exec, or the init containers) would refuse
// after the launcher Pod started; launcher/cmdline renders argv with the same
// values, so a VMI that validates never fails there.
const (
	// MaxBootOrder is the largest disk bootOrder: it becomes QEMU's
	// bootindex property, an int32 ("Parameter 'bootindex' expects
	// int32_t" beyond).
	MaxBootOrder = math.MaxInt32

	// SATAPorts is the number of ports of q35's built-in ICH9 AHCI
	// controller (buses ide.0 … ide.5); launcher/cmdline attaches one SATA
	// disk or CD-ROM per port, in disk order.
	SATAPorts = 6

	// MaxNodeName is the longest QEMU block node name.
	MaxNodeName = 31
	// MaxBlockNodeStem is the longest part of a block node name taken from a
	// disk's name: MaxNodeName less launcher/cmdline's longer prefix,
	// "drive-".
	MaxBlockNodeStem = MaxNodeName - len("drive-")

	// MaxArgLength is the longest single argument execve(2) passes to QEMU
	// (MAX_ARG_STRLEN, 32 pages, counting the terminating NUL): a longer
	// kernelArgs fails QEMU's exec with E2BIG.
	MaxArgLength = 128<<10 - 1
	// MaxPathLength and MaxFileNameLength are Linux's PATH_MAX (less its
	// NUL) and NAME_MAX: open(2) fails with ENAMETOOLONG beyond them.
	MaxPathLength     = 4095
	MaxFileNameLength = 255

	// MaxQCOW2Size is the largest qcow2 image qemu-img creates with its
	// default 64 KiB clusters (2 PiB: a 32 MiB L1 table of 512 MiB L2
	// ranges); an emptyDisk is such an image.
	MaxQCOW2Size int64 = 2 << 50

	// PCIRootSlots is the number of PCI devices kemu can add: QEMU's root
	// bus (q35's pcie.0, pc's pci.0) has 32 slots and the machine itself
	// takes two even with -nodefaults (q35: host bridge and the ICH9
	// functions at 1f; pc: host bridge and PIIX3); launcher/cmdline puts
	// every device there, with no bridges ("PCI: no slot/function
	// available" beyond).
	PCIRootSlots = 30
	// MaxSCSIDisks is how many disks and CD-ROMs one virtio-scsi controller
	// takes (LUNs 0 … 16383, VIRTIO_SCSI_MAX_LUN).
	MaxSCSIDisks = 16384

	// MaxVCPUsI440FX is QEMU's vCPU limit of every pc-i440fx machine and of
	// pc-q35 up to 2.7; later q35 machines allow MaxVCPUs (288), beyond 255
	// only with KVM's in-kernel irqchip and x2APIC.
	MaxVCPUsI440FX uint32 = 255
)

// The oldest versioned machine types any QEMU has had: pc-q35-2.4 and
// pc-i440fx-1.4. Newer ones depend on the QEMU that runs the VMI (7.2 ends
// at 7.2; 10.0 dropped pc-i440fx-1.4 … 2.3 and goes to 10.0), so validation
// does not guess them from a version: the node agent labels its node with
// the machine types its QEMU lists (v1.NodeMachineTypeLabel), a launcher Pod
// asking for a versioned one selects that label, and the launcher refuses a
// machine type its QEMU lacks (launcher/cmdline).
var (
	oldestQ35    = machineVersion{2, 4}
	oldestI440FX = machineVersion{1, 4}
	// newestQ35Max255 is the last q35 machine with i440fx's 255-vCPU limit.
	newestQ35Max255 = machineVersion{2, 7}
)

// machineVersion is a versioned machine type's X.Y.
type machineVersion struct{ major, minor int }

func (v machineVersion) less(o machineVersion) bool {
	return v.major < o.major || v.major == o.major && v.minor < o.minor
}

// parseMachineVersion reads "X.Y"; ok is false for anything else.
func parseMachineVersion(s string) (machineVersion, bool) {
	x, y, found := strings.Cut(s, ".")
	major, err1 := strconv.Atoi(x)
	minor, err2 := strconv.Atoi(y)
	if !found || err1 != nil || err2 != nil || major > 999 || minor > 999 {
		return machineVersion{}, false
	}
	return machineVersion{major, minor}, true
}

// machineKind says whether machine is a q35 or an i440fx machine type some
// QEMU has, and its vCPU limit. ok is false for anything else.
func machineKind(machine string) (q35 bool, maxVCPUs uint32, ok bool) {
	switch {
	case machine == "q35":
		return true, MaxVCPUs, true
	case machine == "pc":
		return false, MaxVCPUsI440FX, true
	case q35Pattern.MatchString(machine):
		v, ok := parseMachineVersion(strings.TrimPrefix(machine, "pc-q35-"))
		if !ok || v.less(oldestQ35) {
			return true, 0, false
		}
		if !newestQ35Max255.less(v) {
			return true, MaxVCPUsI440FX, true
		}
		return true, MaxVCPUs, true
	case i440fxPattern.MatchString(machine):
		v, ok := parseMachineVersion(strings.TrimPrefix(machine, "pc-i440fx-"))
		return false, MaxVCPUsI440FX, ok && !v.less(oldestI440FX)
	}
	return false, 0, false
}

// BlockNodeStem is the part of a disk's QEMU block node names
// ("drive-<stem>", "file-<stem>") taken from the disk's name: the name when
// it has at most MaxBlockNodeStem characters, else its first 16 characters,
// "-" and 8 hex digits of its SHA-256. launcher/cmdline names the nodes with
// it; validation refuses two disks with the same stem (QEMU refuses
// duplicate node names).
func BlockNodeStem(disk string) string {
	if len(disk) <= MaxBlockNodeStem {
		return disk
	}
	sum := sha256.Sum256([]byte(disk))
	return disk[:16] + "-" + hex.EncodeToString(sum[:4])
}

// QEMUDeviceID is the QEMU device id of a disk or an interface
// ("ua-<name>", KubeVirt's user alias): a disk and an interface may not share
// a name.
func QEMUDeviceID(name string) string { return "ua-" + name }

// canonicalUUID is the only UUID form QEMU's -uuid and -smbios uuid= parse
// (qemu_uuid_parse): 8-4-4-4-12 hex digits, no braces, no urn:uuid: prefix.
var canonicalUUID = regexp.MustCompile(`^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$`)

// controlChar returns the first control character (C0, DEL or C1) of s, or
// -1. Invalid UTF-8 counts as one (U+FFFD is returned for it).
func controlChar(s string) rune {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size <= 1 {
				return r
			}
		}
		if unicode.IsControl(r) {
			return r
		}
	}
	return -1
}

// isHelp is what QEMU takes as a request for help instead of a value
// (-machine help, -cpu ?).
func isHelp(s string) bool { return s == "help" || s == "?" }
