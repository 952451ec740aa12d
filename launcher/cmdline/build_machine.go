package cmdline

import (
	"regexp"

	"github.com/google/uuid"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/launcher/downwardmetrics"
)

// identity: -name <namespace>_<name> (namespace "default" when empty),
// -uuid, and SMBIOS serial.
func (b *builder) identity() {
	vmi := b.vmi
	ns := vmi.Namespace
	if ns == "" {
		ns = "default"
	}
	b.add("metadata.name", Name{Guest: b.val("metadata.name", ns+"_"+vmi.Name)})

	fw := vmi.Spec.Domain.Firmware
	if fw == nil {
		fw = &v1.Firmware{}
	}
	id := string(fw.UUID)
	if id == "" {
		id = string(v1.DeriveFirmwareUUID(vmi.Namespace, vmi.Name))
	}
	if _, err := uuid.Parse(id); err != nil {
		b.fail("spec.domain.firmware.uuid", "%q is not a UUID", id)
	}
	b.add("spec.domain.firmware.uuid", UUID(id))
	if fw.Serial != "" {
		b.add("spec.domain.firmware.serial", SMBIOSSystem{Serial: b.val("spec.domain.firmware.serial", fw.Serial), UUID: id})
	}
}

var q35Type = regexp.MustCompile(`^(q35|pc-q35-[0-9]+\.[0-9]+)$`)

// machine: type, accelerator, ACPI, SMM (features.smm; always on for
// Secure Boot), EFI firmware (pflash nodes, secure flash for Secure Boot).
func (b *builder) machine() {
	d := &b.vmi.Spec.Domain
	accel := b.in.Facts.Accel
	if accel != AccelKVM && accel != AccelTCG {
		b.fail("Facts.Accel", "%q: must be %s or %s", accel, AccelKVM, AccelTCG)
	}
	m := Machine{Type: b.val("spec.domain.machine.type", d.Machine.Type), Accel: accel}
	// virtiofsd maps the guest's memory (it must be shared); hugepages
	// back it (build_placement.go).
	m.MemoryBackend = b.machineMemoryBackend()
	m.HPETOff, m.PITOff = b.timers.hpetOff, b.timers.pitOff
	if ms := b.in.Facts.Machines; ms != nil && !ms.Has(d.Machine.Type) {
		b.fail("spec.domain.machine.type", "%q: this node's QEMU has no such machine type (-machine help)", d.Machine.Type)
	}
	if f := d.Features; f != nil && f.ACPI.Enabled != nil && !*f.ACPI.Enabled {
		m.ACPIOff = true
	}
	if f := d.Features; f != nil && f.SMM != nil {
		m.SMM = f.SMM.Enabled == nil || *f.SMM.Enabled
		m.SMMOff = !m.SMM
	}
	var firmware []Device
	var global *Global
	if fw := d.Firmware; fw != nil && fw.Bootloader != nil && fw.Bootloader.EFI != nil {
		efi := fw.Bootloader.EFI
		secure := efi.SecureBoot == nil || *efi.SecureBoot
		path := "spec.domain.firmware.bootloader.efi"
		if secure {
			path += ".secureBoot"
		}
		code, _, err := b.in.Facts.OVMF.Pick(secure)
		if err != nil {
			b.fail(path, "%v", err)
			return
		}
		if b.in.Paths.EFIVars == "" {
			b.fail("Paths.EFIVars", "required for EFI (a writable copy of the OVMF vars template)")
			return
		}
		codeField := "Facts.OVMF.Code"
		if secure {
			codeField = "Facts.OVMF.SecureCode"
		}
		firmware = []Device{
			BlockFile{NodeName: NodePflashCodeFile, Filename: b.val(codeField, code), ReadOnly: true},
			BlockFormat{NodeName: NodePflashCode, Driver: FormatRaw, File: NodePflashCodeFile, ReadOnly: true},
			BlockFile{NodeName: NodePflashVarsFile, Filename: b.val("Paths.EFIVars", b.in.Paths.EFIVars)},
			BlockFormat{NodeName: NodePflashVars, Driver: FormatRaw, File: NodePflashVarsFile},
		}
		m.PFlash0, m.PFlash1 = NodePflashCode, NodePflashVars
		if secure {
			if m.SMMOff {
				b.fail("spec.domain.features.smm.enabled", "false: EFI Secure Boot needs SMM")
			}
			m.SMM = true
			global = &Global{Driver: "cfi.pflash01", Property: "secure", Value: "on"}
		}
	}
	b.add("spec.domain.machine", m)
	b.add("spec.domain.firmware.bootloader.efi", firmware...)
	if global != nil {
		b.add("spec.domain.firmware.bootloader.efi.secureBoot", *global)
	}
}

// cpuAndMemory: -cpu (cpuModel and its flags, build_features.go), -smp,
// -m. Guest memory is rounded down to a whole MiB.
func (b *builder) cpuAndMemory() {
	d := &b.vmi.Spec.Domain
	b.add("spec.domain.cpu.model", b.cpu())
	b.add("spec.domain.cpu", SMP{Sockets: d.CPU.Sockets, Cores: d.CPU.Cores, Threads: d.CPU.Threads})

	bytes := d.Memory.Guest.Value()
	mib := bytes >> 20
	if mib < 1 {
		b.fail("spec.domain.memory.guest", "%s is less than 1Mi", d.Memory.Guest.String())
	}
	b.add("spec.domain.memory.guest", Memory{MiB: uint64(mib)})
	b.guestMemory(uint64(mib))

	for _, disk := range d.Devices.Disks {
		if disk.BootOrder != nil {
			b.add("spec.domain.devices.disks", Boot{Strict: true})
			break
		}
	}
}

// kernel: -kernel, -initrd, -append from spec.domain.firmware.kernelBoot.
func (b *builder) kernel() {
	var kb *v1.KernelBoot
	if fw := b.vmi.Spec.Domain.Firmware; fw != nil {
		kb = fw.KernelBoot
	}
	k := b.in.Kernel
	const p = "spec.domain.firmware.kernelBoot"
	switch {
	case kb == nil && k == nil:
		return
	case kb == nil:
		b.fail("Input.Kernel", "given, but the VMI has no %s", p)
		return
	case k == nil:
		b.fail("Input.Kernel", "required by %s", p)
		return
	}
	var kernelPath, initrdPath string
	if c := kb.Container; c != nil {
		kernelPath, initrdPath = c.KernelPath, c.InitrdPath
	}
	switch {
	case kernelPath == "":
		b.fail(p+".container.kernelPath", "not set: QEMU cannot boot an initrd without a kernel")
	case k.Kernel == "":
		b.fail("Input.Kernel.Kernel", "required by %s.container.kernelPath", p)
	case initrdPath != "" && k.Initrd == "":
		b.fail("Input.Kernel.Initrd", "required by %s.container.initrdPath", p)
	}
	b.add(p, Kernel{
		Kernel: b.arg("Input.Kernel.Kernel", k.Kernel),
		Initrd: b.arg("Input.Kernel.Initrd", k.Initrd),
		Append: b.arg(p+".kernelArgs", kb.KernelArgs),
	})
}

// socket checks a unix socket path.
func (b *builder) socket(field, path string) string {
	if len(path) > MaxSocketPath {
		b.fail(field, "%q is %d bytes; a unix socket path has at most %d", path, len(path), MaxSocketPath)
	}
	return b.val(field, path)
}

// chardevs: two QMP monitors, the serial console, the guest agent channel.
func (b *builder) chardevs() {
	p := b.in.Paths
	qmp := SocketChardev{ID: ChardevQMP, FD: p.QMPFD}
	switch {
	case p.QMPFD != 0:
	case p.QMP == "":
		b.fail("Paths.QMP", "required")
	default:
		qmp.Path = b.socket("Paths.QMP", p.QMP)
	}
	b.add("Paths.QMP", qmp, QMPMonitor{Chardev: ChardevQMP})
	if p.QMPDebug != "" {
		b.add("Paths.QMPDebug", SocketChardev{ID: ChardevQMPDebug, Path: b.socket("Paths.QMPDebug", p.QMPDebug)},
			QMPMonitor{Chardev: ChardevQMPDebug})
	}
	if on := b.vmi.Spec.Domain.Devices.AutoattachSerialConsole; on == nil || *on {
		if p.Serial == "" {
			b.fail("Paths.Serial", "required by spec.domain.devices.autoattachSerialConsole")
		}
		b.add("Paths.Serial", SocketChardev{ID: ChardevSerial, Path: b.socket("Paths.Serial", p.Serial)},
			SerialPort{Chardev: ChardevSerial})
	}
	dm := b.vmi.Spec.Domain.Devices.DownwardMetrics != nil
	if dm && p.DownwardMetrics == "" {
		b.fail("Paths.DownwardMetrics", "required by spec.domain.devices.downwardMetrics")
	}
	if p.GuestAgent != "" || dm {
		b.add("spec.domain.devices", VirtioSerial{ID: VirtioSerialID})
	}
	if p.GuestAgent != "" {
		b.add("Paths.GuestAgent", SocketChardev{ID: ChardevAgent, Path: b.socket("Paths.GuestAgent", p.GuestAgent)},
			VirtSerialPort{Bus: VirtioSerialID + ".0", Chardev: ChardevAgent, Name: AgentPortName})
	}
	if dm {
		b.add("spec.domain.devices.downwardMetrics",
			SocketChardev{ID: ChardevDownwardMetrics, Path: b.socket("Paths.DownwardMetrics", p.DownwardMetrics)},
			VirtSerialPort{Bus: VirtioSerialID + ".0", Chardev: ChardevDownwardMetrics, Name: downwardmetrics.PortName})
	}
}
