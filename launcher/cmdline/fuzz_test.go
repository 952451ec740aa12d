package cmdline

import (
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kemu-dev/kemu/api/manifest"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/api/validation"
	"github.com/kemu-dev/kemu/netsetup"
)

// The fuzz targets of this file check the whole way from a manifest to
// QEMU's argv: whatever api/validation accepts, Build must render (never an
// error after the launcher Pod started, never a panic), and QEMU must read
// back exactly what was meant: the keys kemu wrote, each user string as one
// value (qemuopts_test.go reads argv as QEMU does).
//
// make fuzz runs them for a fixed time; failing inputs are kept under
// testdata/fuzz/<target>/ and replayed by every go test.

// fuzzSeedYAML uses every string of a VMI that reaches argv.
const fuzzSeedYAML = `
apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata:
  name: fuzz
  namespace: ns
spec:
  domain:
    cpu:
      sockets: 1
      cores: 2
      threads: 1
    memory:
      guest: 128Mi
    firmware:
      serial: SN-1
      uuid: 6ba7b810-9dad-11d1-80b4-00c04fd430c8
      kernelBoot:
        kernelArgs: console=ttyS0
        container:
          image: example.com/kernel:1
          kernelPath: /boot/vmlinuz
          initrdPath: /boot/initrd.img
    devices:
      disks:
      - name: root
        bootOrder: 1
        serial: ROOT1
        disk:
          bus: virtio
      - name: data
        disk:
          bus: scsi
      - name: host
        disk:
          bus: sata
      - name: cd
        cdrom:
          bus: sata
      - name: ci
        disk:
          bus: virtio
      interfaces:
      - name: default
        masquerade: {}
        macAddress: "02:00:00:00:00:01"
        ports:
        - port: 22
  networks:
  - name: default
    pod: {}
  volumes:
  - name: root
    containerDisk:
      image: example.com/os:1
      path: /disk/os.qcow2
  - name: data
    emptyDisk:
      capacity: 1Gi
  - name: host
    hostDisk:
      path: /var/disks/host.img
      type: Disk
  - name: cd
    containerDisk:
      image: example.com/iso:1
  - name: ci
    cloudInitNoCloud:
      userData: "#cloud-config\n"
`

// Launcher layout the inputs below imitate (launcher, launcher/storage,
// controller/template).
const (
	fuzzRuntimeDir    = "/var/run/kemu/private/vm"
	fuzzKernelBootDir = "/var/run/kemu/kernel-boot"
	fuzzImageRoot     = "/var/lib/kemu/images/images/sha256-0123/rootfs"
	fuzzPVCRoot       = "/var/run/kemu/pvcs"
	fuzzSecretsDir    = "/var/run/kemu/secrets"
)

// Fuzzer-chosen variations (the mode byte).
const (
	modeStandalone = 1 << iota // kemuctl run: user networking, no taps
	modeImageCache             // kernel and initrd from the launcher's image cache (whole in-image path)
	modeBridge                 // bridge binding instead of masquerade
	modeEFI                    // EFI (Secure Boot) instead of BIOS
	modeMultiqueue             // networkInterfaceMultiqueue
	modeNoKernel               // no kernelBoot at all
	modeIncoming               // a migration target
)

// launcherInput builds Build's input the way the launcher would from a
// valid VMI: drives where launcher/storage puts them, kernel and initrd
// where the init container (or the image cache) put them, NICs from
// netsetup's plan (taps) or kemuctl run's user networking.
func launcherInput(t *testing.T, vmi *v1.VirtualMachineInstance, mode uint8) Input {
	t.Helper()
	e := newGoldenEnv()
	accel := AccelTCG
	if c := vmi.Spec.Domain.Clock; c != nil && c.Timer != nil {
		// Timers only KVM renders (refused at launch under TCG).
		if k := c.Timer.KVM; k != nil && (k.Enabled == nil || *k.Enabled) {
			accel = AccelKVM
		}
		if p := c.Timer.PIT; p != nil && p.TickPolicy == v1.PITTickPolicyDiscard {
			accel = AccelKVM
		}
	}
	in := Input{VMI: vmi, Facts: e.facts(accel), Paths: e.paths(), Drives: map[string]Drive{}, Incoming: mode&modeIncoming != 0,
		Now: time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)}
	in.Facts.CPU = tcgCPUFacts(t)
	if vmi.Spec.Domain.Devices.DownwardMetrics != nil {
		in.Paths.DownwardMetrics = path.Join(fuzzRuntimeDir, "downwardmetrics.sock")
	}
	luns := map[string]bool{}
	for _, d := range vmi.Spec.Domain.Devices.Disks {
		luns[d.Name] = luns[d.Name] || d.LUN != nil
	}
	for _, v := range vmi.Spec.Volumes {
		switch {
		case v.ContainerDisk != nil, v.EmptyDisk != nil, v.Ephemeral != nil:
			in.Drives[v.Name] = Drive{Path: path.Join(fuzzRuntimeDir, v.Name+".qcow2"), Format: FormatQCOW2}
		case v.HostDisk != nil:
			in.Drives[v.Name] = Drive{Path: path.Clean(v.HostDisk.Path), Format: FormatRaw}
		case v.CloudInitNoCloud != nil:
			in.Drives[v.Name] = Drive{Path: path.Join(fuzzRuntimeDir, v.Name+"-cidata.iso"), Format: FormatRaw, ReadOnly: true}
			// The Secret is mounted, and read, at <secrets dir>/<name>.
			if ref := v.CloudInitNoCloud.SecretRef; ref != nil && path.Dir(path.Join(fuzzSecretsDir, ref.Name)) != fuzzSecretsDir {
				t.Fatalf("secretRef %q is mounted at %s, outside %s", ref.Name, path.Join(fuzzSecretsDir, ref.Name), fuzzSecretsDir)
			}
		case v.DownwardMetrics != nil:
			in.Drives[v.Name] = Drive{Path: path.Join(fuzzRuntimeDir, "vhostmd0"), Format: FormatRaw, ReadOnly: true}
		case v.PersistentVolumeClaim != nil && luns[v.Name]:
			// launcher/storage refuses a lun on anything but a block
			// device answering SG_IO, before Build.
			in.Drives[v.Name] = Drive{Path: path.Join(fuzzPVCRoot, v.PersistentVolumeClaim.ClaimName),
				Format: FormatRaw, Block: true, ReadOnly: v.PersistentVolumeClaim.ReadOnly}
		case v.PersistentVolumeClaim != nil:
			in.Drives[v.Name] = Drive{Path: path.Join(fuzzPVCRoot, v.PersistentVolumeClaim.ClaimName, "disk.img"),
				Format: FormatRaw, ReadOnly: v.PersistentVolumeClaim.ReadOnly}
		}
	}
	// Every file takes O_DIRECT, as on the usual node file systems: cache
	// none is refused only by the node (a file system without O_DIRECT),
	// which validation cannot know.
	for name, d := range in.Drives {
		d.DirectIO = true
		in.Drives[name] = d
	}
	if fw := vmi.Spec.Domain.Firmware; fw != nil {
		if kb := fw.KernelBoot; kb != nil && kb.Container != nil {
			where := func(p string) string {
				switch {
				case p == "":
					return ""
				case mode&modeImageCache != 0:
					return fuzzImageRoot + p
				default:
					return path.Join(fuzzKernelBootDir, path.Base(p))
				}
			}
			in.Kernel = &KernelBoot{Kernel: where(kb.Container.KernelPath), Initrd: where(kb.Container.InitrdPath)}
			if mode&modeImageCache == 0 && in.Kernel.Kernel == in.Kernel.Initrd {
				// cmd/kemu-copy: "would both be <dst>/<name>", exit 2.
				t.Fatalf("the init container refuses kernel %q and initrd %q: one file name", kb.Container.KernelPath, kb.Container.InitrdPath)
			}
		}
		if bl := fw.Bootloader; bl != nil && bl.EFI != nil {
			in.Paths.EFIVars = path.Join(fuzzRuntimeDir, "efivars.fd")
		}
	}
	if mode&modeStandalone != 0 {
		for _, iface := range vmi.Spec.Domain.Devices.Interfaces {
			cidr := DefaultUserNet
			for _, n := range vmi.Spec.Networks {
				if n.Name == iface.Name && n.Pod != nil && n.Pod.VMNetworkCIDR != "" {
					cidr = n.Pod.VMNetworkCIDR
				}
			}
			nic := NIC{Name: iface.Name, MAC: iface.MacAddress, Model: iface.Model, User: &UserNet{Net: cidr}}
			for _, p := range iface.Ports {
				nic.User.Forwards = append(nic.User.Forwards, Forward{Proto: p.Protocol, HostAddr: "127.0.0.1", HostPort: 10000 + int(p.Port)%50000, GuestPort: int(p.Port)})
			}
			in.NICs = append(in.NICs, nic)
		}
		return in
	}
	plan, errs := netsetup.NewPlan(vmi, netsetup.Options{})
	if len(errs) > 0 {
		t.Fatalf("netsetup refuses a VMI api/validation accepted: %v", errs.ToAggregate())
	}
	fd := 3
	for _, pi := range plan.Interfaces {
		nic := NIC{Name: pi.Name, Model: pi.Model, MTU: 1500}
		if pi.MAC != nil {
			nic.MAC = pi.MAC.String()
		}
		for range pi.Queues {
			nic.TapFDs = append(nic.TapFDs, fd)
			fd++
		}
		in.NICs = append(in.NICs, nic)
	}
	return in
}

// argvSpec is what kemu may render for one QEMU option: its implied first
// key ("" for none) and the keys it may carry ("driver" keys for -device are
// per driver). Option lists not in here are whole arguments.
var argvSpec = map[string]struct {
	implied string
	keys    []string
}{
	"-machine":  {"type", []string{"type", "accel", "vmport", "dump-guest-core", "acpi", "smm", "pflash0", "pflash1", "memory-backend", "hpet", "pit"}},
	"-smp":      {"cpus", []string{"cpus", "sockets", "cores", "threads"}},
	"-name":     {"guest", []string{"guest", "debug-threads"}},
	"-smbios":   {"", []string{"type", "serial", "uuid"}},
	"-sandbox":  {"enable", []string{"enable", "obsolete", "elevateprivileges", "spawn", "resourcecontrol"}},
	"-msg":      {"", []string{"timestamp"}},
	"-boot":     {"order", []string{"strict"}},
	"-global":   {"", []string{"driver", "property", "value"}},
	"-chardev":  {"backend", []string{"backend", "id", "path", "server", "wait"}},
	"-mon":      {"chardev", []string{"chardev", "mode"}},
	"-blockdev": {"driver", []string{"driver", "node-name", "filename", "read-only", "discard", "file", "cache.direct", "aio", "locking"}},
	"-netdev":   {"type", []string{"type", "id", "fd", "fds", "vhost", "vhostfd", "vhostfds", "net", "host", "dhcpstart", "hostfwd"}},
	"-object":   {"qom-type", []string{"qom-type", "id", "filename", "size", "share"}},
	"-device":   {"driver", nil},
	"-vnc":      {"vnc", []string{"vnc", "share"}},
	"-rtc":      {"", []string{"base", "clock", "driftfix"}},
	"-action":   {"", []string{"watchdog"}},
	"-tpmdev":   {"type", []string{"type", "id", "chardev"}},
}

var blockDeviceKeys = []string{"driver", "drive", "id", "serial", "bootindex", "write-cache", "share-rw"}

var deviceKeys = map[string][]string{
	"virtio-blk-pci":     append(slices.Clone(blockDeviceKeys), "iothread", "num-queues"),
	"scsi-hd":            append(slices.Clone(blockDeviceKeys), "bus", "channel", "scsi-id", "lun"),
	"scsi-cd":            append(slices.Clone(blockDeviceKeys), "bus", "channel", "scsi-id", "lun"),
	"scsi-block":         {"driver", "drive", "id", "bootindex", "share-rw", "bus", "channel", "scsi-id", "lun"},
	"ide-hd":             append(slices.Clone(blockDeviceKeys), "bus"),
	"ide-cd":             append(slices.Clone(blockDeviceKeys), "bus"),
	"virtio-scsi-pci":    {"driver", "id"},
	"virtio-serial-pci":  {"driver", "id"},
	"virtserialport":     {"driver", "bus", "chardev", "name"},
	"tpm-tis":            {"driver", "tpmdev"},
	"tpm-crb":            {"driver", "tpmdev"},
	"virtio-net-pci":     {"driver", "netdev", "id", "mac", "mq", "vectors", "host_mtu"},
	"e1000":              {"driver", "netdev", "id", "mac"},
	"e1000e":             {"driver", "netdev", "id", "mac"},
	"rtl8139":            {"driver", "netdev", "id", "mac"},
	"virtio-rng-pci":     {"driver", "rng"},
	"virtio-balloon-pci": {"driver", "id"},
	"VGA":                {"driver", "id", "vgamem_mb"},
	"vhost-user-fs-pci":  {"driver", "id", "chardev", "tag"},
	"i6300esb":           {"driver", "id"},
	"qemu-xhci":          {"driver", "id"},
	"usb-tablet":         {"driver", "id", "bus"},
	"virtio-tablet-pci":  {"driver", "id"},
}

// wholeArgs take one argument as it is; bareFlags take none.
var (
	wholeArgs = []string{"-cpu", "-m", "-uuid", "-incoming", "-kernel", "-initrd", "-append", "-serial", "-display"}
	bareFlags = []string{"-S", "-nodefaults", "-no-user-config"}
)

// qemuUUID is the only UUID form QEMU parses (qemu_uuid_parse).
var qemuUUID = regexp.MustCompile(`^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$`)

// checkArgv reads argv as QEMU 7.2 would and compares it with what the VMI
// and the input meant.
func checkArgv(t *testing.T, in Input, argv []string) {
	t.Helper()
	vmi := in.VMI
	fail := func(format string, a ...any) {
		t.Helper()
		t.Fatalf("%s\nargv: %q", fmt.Sprintf(format, a...), argv)
	}
	type parsed struct {
		flag string
		opts map[string]string
		raw  string
	}
	var all []parsed
	for i := 0; i < len(argv); i++ {
		flag := argv[i]
		if err := CheckArg(flag); err != nil {
			fail("argument %d: %v", i, err)
		}
		if slices.Contains(bareFlags, flag) {
			continue
		}
		spec, isList := argvSpec[flag]
		if !isList && !slices.Contains(wholeArgs, flag) {
			fail("argument %d %q is not an option kemu renders (an injected argument?)", i, flag)
		}
		if i+1 >= len(argv) {
			fail("%s without its value", flag)
		}
		i++
		val := argv[i]
		if err := CheckArg(val); err != nil {
			fail("%s %q: %v", flag, val, err)
		}
		if !isList {
			all = append(all, parsed{flag: flag, raw: val})
			continue
		}
		if strings.HasPrefix(val, "{") {
			fail("%s %q starts with '{': QEMU would read it as JSON", flag, val)
		}
		opts, help := parseQemuOpts(val, spec.implied)
		if help {
			fail("%s %q asks QEMU for help", flag, val)
		}
		keys := spec.keys
		m := map[string]string{}
		for _, o := range opts {
			if flag == "-device" && o.key == "driver" {
				keys = deviceKeys[o.val]
			}
			if !slices.Contains(keys, o.key) {
				fail("%s %q: key %q is not one kemu writes there (read as %q)", flag, val, o.key, opts)
			}
			if _, dup := m[o.key]; dup && o.key != "hostfwd" {
				fail("%s %q: key %q twice (read as %q)", flag, val, o.key, opts)
			}
			if o.key == spec.implied && (o.val == "help" || o.val == "?") {
				fail("%s %q asks QEMU for help", flag, val)
			}
			m[o.key] = o.val
		}
		all = append(all, parsed{flag: flag, opts: m, raw: val})
	}

	find := func(flag, key, val string) []parsed {
		var out []parsed
		for _, p := range all {
			if p.flag == flag && (key == "" || p.opts[key] == val) {
				out = append(out, p)
			}
		}
		return out
	}
	one := func(flag, key, val string) parsed {
		t.Helper()
		ps := find(flag, key, val)
		if len(ps) != 1 {
			fail("%d %s with %s=%q, want 1", len(ps), flag, key, val)
		}
		return ps[0]
	}

	// Identity.
	ns := vmi.Namespace
	if ns == "" {
		ns = "default"
	}
	if got := one("-name", "", "").opts["guest"]; got != ns+"_"+vmi.Name {
		fail("-name guest=%q, want %q", got, ns+"_"+vmi.Name)
	}
	u := one("-uuid", "", "").raw
	if !qemuUUID.MatchString(u) {
		fail("-uuid %q: QEMU parses only xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", u)
	}
	if fw := vmi.Spec.Domain.Firmware; fw != nil && fw.Serial != "" {
		s := one("-smbios", "", "").opts
		if s["serial"] != fw.Serial || !qemuUUID.MatchString(s["uuid"]) {
			fail("-smbios serial=%q uuid=%q, want serial %q", s["serial"], s["uuid"], fw.Serial)
		}
	}
	if got := one("-machine", "", "").opts["type"]; got != vmi.Spec.Domain.Machine.Type {
		fail("-machine type %q, want %q", got, vmi.Spec.Domain.Machine.Type)
	}
	// -cpu is <model>[,<flag>=<value>…]: QEMU splits the model at the first
	// ',' and the flags at each, with no escaping.
	cpuModel, cpuFlags, _ := strings.Cut(one("-cpu", "", "").raw, ",")
	if cpuModel == "" || cpuModel == "help" || cpuModel == "?" || strings.ContainsAny(cpuModel, "=") {
		fail("-cpu model %q: not a model name, or QEMU prints help", cpuModel)
	}
	if cpuFlags != "" {
		for _, f := range strings.Split(cpuFlags, ",") {
			if k, v, ok := strings.Cut(f, "="); !ok || !cpuFlagValue.MatchString(k) || !cpuFlagValue.MatchString(v) {
				fail("-cpu flag %q: not <name>=<value>", f)
			}
		}
	}

	// Disks: one file node, one format node and one device each.
	for _, d := range vmi.Spec.Domain.Devices.Disks {
		drv := in.Drives[d.Name]
		f := one("-blockdev", "node-name", FileNodeName(d.Name))
		if f.opts["filename"] != drv.Path {
			fail("disk %q: filename %q, want %q", d.Name, f.opts["filename"], drv.Path)
		}
		if fm := one("-blockdev", "node-name", NodeName(d.Name)); fm.opts["file"] != FileNodeName(d.Name) {
			fail("disk %q: format node on %q", d.Name, fm.opts["file"])
		}
		dev := one("-device", "id", DiskDeviceID(d.Name))
		if dev.opts["drive"] != NodeName(d.Name) || dev.opts["serial"] != d.Serial {
			fail("disk %q: device drive=%q serial=%q, want %q %q", d.Name, dev.opts["drive"], dev.opts["serial"], NodeName(d.Name), d.Serial)
		}
		want := ""
		if d.BootOrder != nil {
			want = strconv.FormatUint(uint64(*d.BootOrder), 10)
		}
		if dev.opts["bootindex"] != want {
			fail("disk %q: bootindex %q, want %q", d.Name, dev.opts["bootindex"], want)
		}
	}
	// Interfaces: one backend and one NIC each.
	for _, iface := range vmi.Spec.Domain.Devices.Interfaces {
		one("-netdev", "id", NetdevID(iface.Name))
		if dev := one("-device", "id", NICDeviceID(iface.Name)); dev.opts["netdev"] != NetdevID(iface.Name) {
			fail("interface %q: NIC on netdev %q", iface.Name, dev.opts["netdev"])
		}
	}
	ids := 0
	for _, p := range find("-device", "", "") {
		if strings.HasPrefix(p.opts["id"], "ua-") {
			ids++
		}
	}
	if want := len(vmi.Spec.Domain.Devices.Disks) + len(vmi.Spec.Domain.Devices.Interfaces); ids != want {
		fail("%d devices with a user alias, want %d", ids, want)
	}

	// TPM: one tpm-tis (tpm-crb when persistent) on an emulator backend
	// whose chardev is swtpm's socket in the runtime directory, or none.
	if v1.HasTPM(&vmi.Spec) {
		model := TPMModel
		if v1.HasPersistentTPM(&vmi.Spec) {
			model = PersistentTPMModel
		}
		one("-device", "driver", model)
		if got := one("-tpmdev", "", "").opts["type"]; got != "emulator" {
			fail("-tpmdev type=%q, want emulator", got)
		}
		if got := one("-chardev", "id", TPMID+"-ctrl").opts["path"]; got != TPMSocket(in.Paths.Dir) {
			fail("TPM chardev path %q, want %s", got, TPMSocket(in.Paths.Dir))
		}
	} else if len(find("-tpmdev", "", "")) != 0 {
		fail("no TPM, yet a -tpmdev")
	}

	// Graphics: one VGA device and a VNC server on the launcher's unix
	// socket only, or neither.
	if HasGraphics(&vmi.Spec.Domain.Devices) {
		one("-device", "driver", "VGA")
		if got := one("-vnc", "", "").opts["vnc"]; got != "unix:"+in.Paths.VNC {
			fail("-vnc vnc=%q, want unix:%s", got, in.Paths.VNC)
		}
	} else if len(find("-vnc", "", ""))+len(find("-device", "driver", "VGA")) != 0 {
		fail("graphics off, yet a VGA device or a VNC server")
	}

	// Kernel boot: whole arguments, as they are; -initrd must read as one
	// file under both of QEMU's readings (Linux: as it is; multiboot:
	// modules split at ',' and cut at ' ').
	if k := in.Kernel; k != nil {
		kb := vmi.Spec.Domain.Firmware.KernelBoot
		if got := one("-kernel", "", "").raw; got != k.Kernel {
			fail("-kernel %q, want %q", got, k.Kernel)
		}
		if k.Initrd != "" {
			got := one("-initrd", "", "").raw
			if mods := multibootModules(got); got != k.Initrd || len(mods) != 1 || mods[0] != got {
				fail("-initrd %q (multiboot modules %q), want the one file %q", got, mods, k.Initrd)
			}
		}
		if kb.KernelArgs != "" {
			if got := one("-append", "", "").raw; got != kb.KernelArgs {
				fail("-append %q, want %q", got, kb.KernelArgs)
			}
		}
	}
}

// buildValid is the property every target checks: a VMI api/validation
// accepts is rendered, and read back as meant.
func buildValid(t *testing.T, vmi *v1.VirtualMachineInstance, mode uint8) {
	t.Helper()
	in := launcherInput(t, vmi, mode)
	argv, err := Build(in)
	if err != nil && nodeRefusal(err) {
		return
	}
	if err != nil {
		t.Fatalf("Build refuses a VMI api/validation accepted: %v", err)
	}
	checkArgv(t, in, argv)
}

// nodeRefusal says whether Build refused what only the node knows: the
// accelerator (KVM-only features under TCG) and its QEMU's CPU models and
// features (build_features.go).
func nodeRefusal(err error) bool {
	for _, s := range []string{"needs KVM", "no such CPU model", "no such CPU feature", "cannot provide it",
		"provides it on this node", "not usable under"} {
		if strings.Contains(err.Error(), s) {
			return true
		}
	}
	return false
}

// argvFields are the VMI strings FuzzArgv varies, each set on the seed
// VMI (fuzzSeedYAML) by index: every string of a VMI that reaches QEMU's
// argv, the Pod, or a file name.
var argvFields = []struct {
	name string
	set  func(vmi *v1.VirtualMachineInstance, s string)
}{
	{"metadata.name", func(vmi *v1.VirtualMachineInstance, s string) { vmi.Name = s }},
	{"metadata.namespace", func(vmi *v1.VirtualMachineInstance, s string) { vmi.Namespace = s }},
	{"machine.type", func(vmi *v1.VirtualMachineInstance, s string) { vmi.Spec.Domain.Machine = &v1.Machine{Type: s} }},
	{"cpu.model", func(vmi *v1.VirtualMachineInstance, s string) { vmi.Spec.Domain.CPU.Model = s }},
	{"firmware.serial", func(vmi *v1.VirtualMachineInstance, s string) { vmi.Spec.Domain.Firmware.Serial = s }},
	{"firmware.uuid", func(vmi *v1.VirtualMachineInstance, s string) { vmi.Spec.Domain.Firmware.UUID = types.UID(s) }},
	{"kernelBoot.kernelArgs", func(vmi *v1.VirtualMachineInstance, s string) { vmi.Spec.Domain.Firmware.KernelBoot.KernelArgs = s }},
	{"kernelBoot.container.kernelPath", func(vmi *v1.VirtualMachineInstance, s string) {
		vmi.Spec.Domain.Firmware.KernelBoot.Container.KernelPath = s
	}},
	{"kernelBoot.container.initrdPath", func(vmi *v1.VirtualMachineInstance, s string) {
		vmi.Spec.Domain.Firmware.KernelBoot.Container.InitrdPath = s
	}},
	{"kernelBoot.container.image", func(vmi *v1.VirtualMachineInstance, s string) {
		vmi.Spec.Domain.Firmware.KernelBoot.Container.Image = s
	}},
	{"volumes[host].hostDisk.path", func(vmi *v1.VirtualMachineInstance, s string) { vmi.Spec.Volumes[2].HostDisk.Path = s }},
	{"volumes[cd].containerDisk.path", func(vmi *v1.VirtualMachineInstance, s string) { vmi.Spec.Volumes[3].ContainerDisk.Path = s }},
	{"disks[data].name", func(vmi *v1.VirtualMachineInstance, s string) {
		vmi.Spec.Domain.Devices.Disks[1].Name, vmi.Spec.Volumes[1].Name = s, s
	}},
	{"disks[root].serial", func(vmi *v1.VirtualMachineInstance, s string) { vmi.Spec.Domain.Devices.Disks[0].Serial = s }},
	{"interfaces[0].name", func(vmi *v1.VirtualMachineInstance, s string) {
		vmi.Spec.Domain.Devices.Interfaces[0].Name, vmi.Spec.Networks[0].Name = s, s
	}},
	{"interfaces[0].macAddress", func(vmi *v1.VirtualMachineInstance, s string) { vmi.Spec.Domain.Devices.Interfaces[0].MacAddress = s }},
	{"interfaces[0].model", func(vmi *v1.VirtualMachineInstance, s string) { vmi.Spec.Domain.Devices.Interfaces[0].Model = s }},
	{"interfaces[0].ports[0].protocol", func(vmi *v1.VirtualMachineInstance, s string) {
		vmi.Spec.Domain.Devices.Interfaces[0].Ports[0].Protocol = s
	}},
	{"networks[0].pod.vmNetworkCIDR", func(vmi *v1.VirtualMachineInstance, s string) { vmi.Spec.Networks[0].Pod.VMNetworkCIDR = s }},
	{"volumes[ci].cloudInitNoCloud.secretRef.name", func(vmi *v1.VirtualMachineInstance, s string) {
		vmi.Spec.Volumes[4].CloudInitNoCloud = &v1.CloudInitNoCloudSource{SecretRef: &corev1.LocalObjectReference{Name: s}}
	}},
}

// argvField is the index of the argvFields entry named name.
func argvField(name string) uint8 {
	for i, f := range argvFields {
		if f.name == name {
			return uint8(i)
		}
	}
	panic("no argv field " + name)
}

// FuzzArgv varies the VMI strings that reach QEMU's argv on a valid seed
// (two at a time: field f1 gets val1, f2 gets val2), a disk's bootOrder, a
// port, the data disk's bus and the launcher's mode; whatever validation
// accepts must build and read back as meant.
func FuzzArgv(f *testing.F) {
	none := uint8(len(argvFields)) // an index past the list sets nothing
	for _, s := range []struct {
		f1        string
		v1        string
		f2        string
		v2        string
		bootOrder uint
		port      uint16
		bus, mode uint8
	}{
		{f1: "firmware.serial", v1: "SN,1,,2 x=y", f2: "volumes[host].hostDisk.path", v2: "/var/disks/vol,1/d.img", bootOrder: 2, port: 22},
		{f1: "kernelBoot.kernelArgs", v1: "a,b=c,,d x=\"y z\"", bootOrder: 2, port: 22, mode: modeImageCache},
		{f1: "metadata.name", v1: "web.example.com", f2: "disks[data].name", v2: strings.Repeat("d", 40), port: 22},
		{f1: "machine.type", v1: "pc-q35-6.2", f2: "cpu.model", v2: "qemu64", bootOrder: validation.MaxBootOrder, port: 22, bus: 2, mode: modeStandalone},
		{f1: "firmware.uuid", v1: "6BA7B810-9DAD-11D1-80B4-00C04FD430C8", port: 22, bus: 1 | 16, mode: modeEFI},
		{f1: "interfaces[0].macAddress", v1: "", f2: "interfaces[0].model", v2: "e1000", port: 22, mode: modeBridge},
		{f1: "interfaces[0].model", v1: "virtio", port: 22, mode: modeMultiqueue | modeIncoming},
		{f1: "networks[0].pod.vmNetworkCIDR", v1: "192.168.7.128/25", f2: "interfaces[0].ports[0].protocol", v2: "UDP", port: 53, mode: modeStandalone},
		{f1: "volumes[ci].cloudInitNoCloud.secretRef.name", v1: "my-secret", port: 22, mode: modeNoKernel},
		{f1: "kernelBoot.container.initrdPath", v1: "/boot/initramfs-6.1.img", f2: "kernelBoot.container.image", v2: "registry:5000/k/kernel@sha256:0123", port: 22},
	} {
		f1, f2 := none, none
		if s.f1 != "" {
			f1 = argvField(s.f1)
		}
		if s.f2 != "" {
			f2 = argvField(s.f2)
		}
		f.Add(f1, s.v1, f2, s.v2, s.bootOrder, s.port, s.bus, s.mode)
	}
	seed := readVMI(f, "fuzzSeedYAML", strings.NewReader(fuzzSeedYAML))
	f.Fuzz(func(t *testing.T, f1 uint8, val1 string, f2 uint8, val2 string, bootOrder uint, port uint16, bus, mode uint8) {
		vmi := seed.DeepCopy()
		if int(f1) < len(argvFields) {
			argvFields[f1].set(vmi, val1)
		}
		if int(f2) < len(argvFields) {
			argvFields[f2].set(vmi, val2)
		}
		d := &vmi.Spec.Domain
		disks := d.Devices.Disks
		if bootOrder != 0 {
			disks[1].BootOrder = &bootOrder
		}
		d.Devices.Interfaces[0].Ports[0].Port = int32(port)
		// bus: the data disk's bus (low 2 bits), read-only (bit 2),
		// cloud-init on SATA (bit 3), the data disk a CD-ROM (bit 4).
		buses := []v1.DiskBus{v1.DiskBusSCSI, v1.DiskBusSATA, v1.DiskBusVirtio, "ide"}
		disks[1].Disk.Bus = buses[bus&3]
		disks[1].Disk.ReadOnly = bus&4 != 0
		if bus&8 != 0 {
			disks[4].Disk.Bus = v1.DiskBusSATA
		}
		if bus&16 != 0 {
			disks[1].CDRom, disks[1].Disk = &v1.CDRomTarget{Bus: buses[bus&3]}, nil
		}
		if mode&modeNoKernel != 0 {
			d.Firmware.KernelBoot = nil
		}
		if mode&modeEFI != 0 {
			d.Firmware.Bootloader = &v1.Bootloader{EFI: &v1.EFI{}}
		}
		iface := &d.Devices.Interfaces[0]
		if mode&modeBridge != 0 {
			iface.Masquerade, iface.Bridge, iface.Ports = nil, &v1.InterfaceBridge{}, nil
		}
		if mode&modeMultiqueue != 0 {
			mq := true
			d.Devices.NetworkInterfaceMultiqueue = &mq
		}
		if mode&modeStandalone != 0 && (mode&modeBridge != 0 || mode&modeMultiqueue != 0) {
			mode &^= modeStandalone // kemuctl run refuses both before Build
		}
		v1.SetVirtualMachineInstanceDefaults(vmi)
		if errs := validation.ValidateVirtualMachineInstance(vmi); len(errs) > 0 {
			return
		}
		buildValid(t, vmi, mode)
	})
}

// FuzzManifestArgv starts from manifest bytes (the seeds: every VMI of
// testdata/): api/manifest decodes, defaults and validates; a VMI without
// errors must build, and read back as meant.
func FuzzManifestArgv(f *testing.F) {
	seeds, err := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(0))
	}
	f.Add([]byte(fuzzSeedYAML), uint8(0))
	f.Add([]byte(fuzzSeedYAML), uint8(modeStandalone|modeImageCache))
	f.Fuzz(func(t *testing.T, doc []byte, mode uint8) {
		docs, err := manifest.Read(bytes.NewReader(doc))
		if err != nil || len(docs) != 1 || len(docs[0].Errors) > 0 {
			return
		}
		vmi, ok := docs[0].Object.(*v1.VirtualMachineInstance)
		if !ok {
			return
		}
		for _, iface := range vmi.Spec.Domain.Devices.Interfaces {
			if iface.Bridge != nil {
				mode &^= modeStandalone
			}
		}
		if mq := vmi.Spec.Domain.Devices.NetworkInterfaceMultiqueue; mq != nil && *mq {
			mode &^= modeStandalone
		}
		buildValid(t, vmi, mode)
	})
}
