package cmdline

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kemu-dev/kemu/api/manifest"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// env supplies the files and fds a case refers to: fixed, made-up paths
// for the golden files (goldenEnv), real files, taps and sockets for the
// QEMU test (qemuEnv, build tag qemu).
type env interface {
	facts(accel string) Facts
	paths() Paths
	socket(t testing.TB, name string) string                    // another unix socket path
	overlay(t testing.TB, name string) string                   // qcow2 over the test guest's disk
	image(t testing.TB, name, format string, size int64) string // a blank image; name may hold '/'
	media(t testing.TB, name string) string                     // CD-ROM media (raw, 1 MiB)
	preallocated(t testing.TB, name string, size int64) string  // a raw image with every byte allocated
	kernel(t testing.TB) *KernelBoot                            // the test guest's kernel and initrd
	efiVars(t testing.TB, secure bool) string                   // a writable copy of the vars template
	taps(t testing.TB, n int) []int                             // n tap queues, as fds in QEMU
	vhostFDs(t testing.TB, n int) []int                         // n vhost-net fds (only if facts say so)
	port(t testing.TB) int                                      // a free host port
}

// testCase is one VMI and its inputs; each has a golden file, and the QEMU
// test starts it (and boots it when boot is set).
type testCase struct {
	name  string // testdata/<name>.golden
	vmi   string // testdata/<vmi>.yaml
	accel string // "" = tcg
	vhost bool   // Facts.VhostNet (golden only: this host has no /dev/vhost-net)
	setup func(t testing.TB, e env, in *Input)

	noQEMU bool // golden only (e.g. KVM: does not work on this host)
	boot   bool // the QEMU test waits for the guest's ready marker
}

func (tc testCase) input(t testing.TB, e env) Input {
	t.Helper()
	accel := tc.accel
	if accel == "" {
		accel = AccelTCG
	}
	facts := e.facts(accel)
	facts.VhostNet = facts.VhostNet && tc.vhost
	in := Input{VMI: loadVMI(t, tc.vmi), Facts: facts, Paths: e.paths(), Drives: map[string]Drive{}}
	if fw := in.VMI.Spec.Domain.Firmware; fw != nil {
		if fw.KernelBoot != nil {
			in.Kernel = e.kernel(t)
		}
		if bl := fw.Bootloader; bl != nil && bl.EFI != nil {
			in.Paths.EFIVars = e.efiVars(t, bl.EFI.SecureBoot == nil || *bl.EFI.SecureBoot)
		}
	}
	if tc.setup != nil {
		tc.setup(t, e, &in)
	}
	return in
}

func loadVMI(t testing.TB, name string) *v1.VirtualMachineInstance {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return readVMI(t, f.Name(), f)
}

func readVMI(t testing.TB, name string, r interface{ Read([]byte) (int, error) }) *v1.VirtualMachineInstance {
	t.Helper()
	docs, err := manifest.Read(r)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(docs) != 1 {
		t.Fatalf("%s: %d documents, want 1", name, len(docs))
	}
	if errs := docs[0].Errors; len(errs) > 0 {
		t.Fatalf("%s: %v", name, errs.ToAggregate())
	}
	vmi, ok := docs[0].Object.(*v1.VirtualMachineInstance)
	if !ok {
		t.Fatalf("%s: a %T, want a VirtualMachineInstance", name, docs[0].Object)
	}
	return vmi
}

func mustVMI(t testing.TB, yaml string) *v1.VirtualMachineInstance {
	t.Helper()
	return readVMI(t, "inline", strings.NewReader(yaml))
}

const mib = 1 << 20

func userNIC(name string) NIC { return NIC{Name: name, User: &UserNet{}} }

var cases = []testCase{
	{name: "minimal", vmi: "minimal", boot: true, setup: func(t testing.TB, e env, in *Input) {
		in.Drives["root"] = Drive{Path: e.overlay(t, "root"), Format: FormatQCOW2}
		in.NICs = []NIC{userNIC("default")}
	}},
	{name: "kernelboot", vmi: "kernelboot", boot: true},
	// Clock offset and timers, watchdog, usb and virtio tablets: QEMU takes
	// them (the guest's view: launcher's TestClockInputsWatchdog).
	{name: "devices", vmi: "devices", setup: func(t testing.TB, e env, in *Input) {
		in.Drives["root"] = Drive{Path: e.overlay(t, "root"), Format: FormatQCOW2}
		in.NICs = []NIC{userNIC("default")}
		in.Now = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	}},
	{name: "efi", vmi: "efi", boot: true, setup: func(t testing.TB, e env, in *Input) {
		in.Drives["root"] = Drive{Path: e.overlay(t, "root"), Format: FormatQCOW2}
	}},
	{name: "efi-secure", vmi: "efi-secure", setup: func(t testing.TB, e env, in *Input) {
		in.Drives["root"] = Drive{Path: e.overlay(t, "root"), Format: FormatQCOW2}
	}},
	{name: "buses", vmi: "buses", boot: true, setup: func(t testing.TB, e env, in *Input) {
		in.Drives["root"] = Drive{Path: e.overlay(t, "root"), Format: FormatQCOW2}
		in.Drives["data-virtio"] = Drive{Path: e.image(t, "data-virtio", FormatQCOW2, 16*mib), Format: FormatQCOW2}
		in.Drives["data-scsi"] = Drive{Path: e.image(t, "data-scsi", FormatQCOW2, 24*mib), Format: FormatQCOW2}
		in.Drives["data-sata"] = Drive{Path: e.image(t, "data-sata", FormatRaw, 8*mib), Format: FormatRaw}
		in.Drives["cd-sata"] = Drive{Path: e.media(t, "cd-sata"), Format: FormatRaw, ReadOnly: true}
		in.Drives["cd-scsi"] = Drive{Path: e.media(t, "cd-scsi"), Format: FormatRaw, ReadOnly: true}
	}},
	{name: "readonly", vmi: "readonly", boot: true, setup: func(t testing.TB, e env, in *Input) {
		in.Drives["ro-virtio"] = Drive{Path: e.image(t, "ro-virtio", FormatRaw, 4*mib), Format: FormatRaw}
		in.Drives["ro-claim"] = Drive{Path: e.image(t, "ro-claim", FormatRaw, 6*mib), Format: FormatRaw, ReadOnly: true}
	}},
	{name: "devices-off", vmi: "devices-off"},
	{name: "acpi-off", vmi: "acpi-off", boot: true},
	// QEMU needs swtpm listening: launcher's TestTPM boots it.
	{name: "tpm", vmi: "tpm", noQEMU: true},
	// persistent: tpm-crb (launcher's TestPersistentTPM boots it).
	{name: "tpm-persistent", vmi: "tpm-persistent", noQEMU: true},
	{name: "acpi-off-pc", vmi: "acpi-off-pc", boot: true},
	{name: "smm-off-cdrom-rw", vmi: "smm-off-cdrom-rw", boot: true, setup: func(t testing.TB, e env, in *Input) {
		in.Drives["cd"] = Drive{Path: e.media(t, "cd"), Format: FormatRaw}
	}},
	{name: "smm-on-pc", vmi: "smm-on-pc", boot: true},
	{name: "tap-mq-vhost", vmi: "tap-mq", vhost: true, boot: true, setup: func(t testing.TB, e env, in *Input) {
		nic := NIC{Name: "default", TapFDs: e.taps(t, 2), MTU: 1450}
		if in.Facts.VhostNet {
			nic.VhostFDs = e.vhostFDs(t, 2)
		}
		in.NICs = []NIC{nic}
	}},
	{name: "tap-e1000", vmi: "tap-e1000", setup: func(t testing.TB, e env, in *Input) {
		in.NICs = []NIC{{Name: "default", TapFDs: e.taps(t, 1)}}
	}},
	// QEMU starts with passt in launcher's TestPasst (a real passt, in a pod
	// network namespace).
	{name: "passt", vmi: "passt", noQEMU: true, setup: func(t testing.TB, e env, in *Input) {
		in.NICs = []NIC{{Name: "default", PasstFD: 3}}
	}},
	{name: "usernet", vmi: "usernet", boot: true, setup: func(t testing.TB, e env, in *Input) {
		in.NICs = []NIC{{Name: "default", User: &UserNet{
			Net: in.VMI.Spec.Networks[0].Pod.VMNetworkCIDR,
			Forwards: []Forward{
				{Proto: "TCP", HostAddr: "127.0.0.1", HostPort: e.port(t), GuestPort: 22},
				{Proto: "UDP", HostPort: e.port(t), GuestPort: 53},
			},
		}}}
	}},
	{name: "incoming", vmi: "incoming", setup: func(t testing.TB, e env, in *Input) { in.Incoming = true }},
	{name: "cpu-kvm", vmi: "cpu", accel: AccelKVM, noQEMU: true},
	{name: "filesystems", vmi: "filesystems", noQEMU: true},
	{name: "cpu-tcg", vmi: "cpu", boot: true},
	{name: "cpu-named-kvm", vmi: "cpu-named", accel: AccelKVM, noQEMU: true},
	{name: "cpu-named-tcg", vmi: "cpu-named"},
	{name: "pci-slots", vmi: "pci-slots", setup: func(t testing.TB, e env, in *Input) {
		for _, d := range in.VMI.Spec.Domain.Devices.Disks {
			in.Drives[d.Name] = Drive{Path: e.image(t, d.Name, FormatQCOW2, mib), Format: FormatQCOW2}
		}
		in.NICs = []NIC{userNIC("default")}
	}},
	{name: "disk-cache", vmi: "disk-cache", boot: true, setup: func(t testing.TB, e env, in *Input) {
		in.Drives["overlay"] = Drive{Path: e.overlay(t, "overlay"), Format: FormatQCOW2, DirectIO: true}
		in.Drives["prealloc"] = Drive{Path: e.preallocated(t, "prealloc", 7*mib), Format: FormatRaw, DirectIO: true, Preallocated: true}
		in.Drives["no-direct"] = Drive{Path: e.image(t, "no-direct", FormatRaw, 8*mib), Format: FormatRaw}
		in.Drives["writeback"] = Drive{Path: e.image(t, "writeback", FormatQCOW2, 5*mib), Format: FormatQCOW2, DirectIO: true}
		in.Drives["writethrough"] = Drive{Path: e.image(t, "writethrough", FormatQCOW2, 6*mib), Format: FormatQCOW2, DirectIO: true}
		in.Drives["shared"] = Drive{Path: e.image(t, "shared", FormatRaw, 9*mib), Format: FormatRaw, DirectIO: true}
	}},
	{name: "iothreads", vmi: "iothreads", boot: true, setup: func(t testing.TB, e env, in *Input) {
		for _, d := range in.VMI.Spec.Domain.Devices.Disks {
			in.Drives[d.Name] = Drive{Path: e.image(t, d.Name, FormatQCOW2, mib), Format: FormatQCOW2, DirectIO: true}
		}
	}},
	{name: "iothreads-shared", vmi: "iothreads-shared", setup: func(t testing.TB, e env, in *Input) {
		for _, d := range in.VMI.Spec.Domain.Devices.Disks {
			in.Drives[d.Name] = Drive{Path: e.image(t, d.Name, FormatQCOW2, mib), Format: FormatQCOW2, DirectIO: true}
		}
	}},
	{name: "downward-metrics", vmi: "downward-metrics", boot: true, setup: func(t testing.TB, e env, in *Input) {
		in.Drives["metrics"] = Drive{Path: e.image(t, "vhostmd0", FormatRaw, 256<<10), Format: FormatRaw, ReadOnly: true, DirectIO: true}
		in.Paths.DownwardMetrics = e.socket(t, "downwardmetrics.sock")
	}},
	// Golden only: scsi-block needs a device answering SG_IO, and this
	// machine has none (docs/launcher.md#luns).
	{name: "lun", vmi: "lun", noQEMU: true, setup: func(t testing.TB, e env, in *Input) {
		in.Drives["san"] = Drive{Path: "/var/run/kemu/pvcs/san", Format: FormatRaw, Block: true, DirectIO: true}
		in.Drives["data"] = Drive{Path: e.image(t, "data", FormatQCOW2, mib), Format: FormatQCOW2, DirectIO: true}
		in.Drives["san-ro"] = Drive{Path: "/var/run/kemu/pvcs/san-ro", Format: FormatRaw, Block: true, DirectIO: true}
	}},
	{name: "escaping", vmi: "escaping", boot: true, setup: func(t testing.TB, e env, in *Input) {
		name := in.VMI.Spec.Domain.Devices.Disks[0].Name
		in.Drives[name] = Drive{Path: e.image(t, "vol,1/data", FormatRaw, 4*mib), Format: FormatRaw}
		in.Paths.QMPDebug = e.socket(t, "debug,1.sock")
	}},
}
