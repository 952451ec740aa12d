package cmdline

import (
	"fmt"
	"regexp"
	"strconv"
)

// Machine is -machine <Type>,accel=<Accel>,... . vmport and guest-core
// dumps are always off (no VMware backdoor port; a QEMU core dump never
// carries guest memory).
type Machine struct {
	Type    string // q35, pc-q35-X.Y, pc, pc-i440fx-X.Y
	Accel   string // kvm or tcg
	ACPIOff bool   // acpi=off
	SMM     bool   // smm=on (needed by Secure Boot firmware)
	SMMOff  bool   // smm=off (neither: QEMU's default)
	// PFlash0 and PFlash1 are the block node names of the firmware code
	// and variable store (EFI); "" = none (SeaBIOS).
	PFlash0, PFlash1 string
	// MemoryBackend is the id of the guest memory's backend object
	// (SharedMemory); "": QEMU's own.
	MemoryBackend string
	HPETOff       bool // hpet=off (spec.domain.clock.timer.hpet.present false)
	PITOff        bool // pit=off (spec.domain.clock.timer.pit.present false)
}

// Args implements Device.
func (m Machine) Args() ([]string, error) {
	if m.Accel != AccelKVM && m.Accel != AccelTCG {
		return nil, fmt.Errorf("-machine: accel %q is neither %s nor %s", m.Accel, AccelKVM, AccelTCG)
	}
	if m.Type == "" || isHelp(m.Type) {
		return nil, fmt.Errorf("-machine: bad machine type %q", m.Type)
	}
	o := newOpts(m.Type).add("accel", m.Accel).add("vmport", "off").add("dump-guest-core", "off")
	if m.ACPIOff {
		o.add("acpi", "off")
	}
	if m.SMM && m.SMMOff {
		return nil, fmt.Errorf("-machine: smm both on and off")
	}
	o.on("smm", m.SMM)
	if m.SMMOff {
		o.add("smm", "off")
	}
	if (m.PFlash0 == "") != (m.PFlash1 == "") {
		return nil, fmt.Errorf("-machine: pflash0 and pflash1 go together")
	}
	o.addNonEmpty("pflash0", m.PFlash0).addNonEmpty("pflash1", m.PFlash1)
	o.addNonEmpty("memory-backend", m.MemoryBackend)
	if m.HPETOff {
		o.add("hpet", "off")
	}
	if m.PITOff {
		o.add("pit", "off")
	}
	return o.arg("-machine")
}

// cpuModelName is what -cpu takes as a model: QEMU splits -cpu at the first
// comma itself (not an option list), so a model name cannot be escaped.
var cpuModelName = regexp.MustCompile(`^[A-Za-z0-9_.+-]+$`)

// CPU is -cpu <Model>[,<flag>=<value>…]: "host" (KVM only), "max", or a
// named model, with CPU feature and hypervisor flags (build_features.go).
type CPU struct {
	Model string
	Flags []CPUFlag
}

// CPUFlag is one <name>=<value> of -cpu.
type CPUFlag struct{ Name, Value string }

// cpuFlagValue is what a -cpu flag's name or value may be: QEMU splits
// -cpu's feature list at commas without escaping.
var cpuFlagValue = regexp.MustCompile(`^[A-Za-z0-9_.+-]+$`)

// Args implements Device.
func (c CPU) Args() ([]string, error) {
	if !cpuModelName.MatchString(c.Model) || isHelp(c.Model) {
		return nil, fmt.Errorf("-cpu: %q is not a CPU model name (letters, digits, '_', '.', '+', '-')", c.Model)
	}
	arg := c.Model
	for _, f := range c.Flags {
		if !cpuFlagValue.MatchString(f.Name) || !cpuFlagValue.MatchString(f.Value) || isHelp(f.Name) {
			return nil, fmt.Errorf("-cpu: bad flag %q=%q (letters, digits, '_', '.', '+', '-')", f.Name, f.Value)
		}
		arg += "," + f.Name + "=" + f.Value
	}
	return []string{"-cpu", arg}, nil
}

// SMP is the CPU topology; the vCPU count is their product.
type SMP struct{ Sockets, Cores, Threads uint32 }

// Args implements Device.
func (s SMP) Args() ([]string, error) {
	n := uint64(s.Sockets) * uint64(s.Cores) * uint64(s.Threads)
	if n == 0 {
		return nil, fmt.Errorf("-smp: sockets, cores and threads must be at least 1")
	}
	return newOpts(strconv.FormatUint(n, 10)).
		addInt("sockets", int(s.Sockets)).addInt("cores", int(s.Cores)).addInt("threads", int(s.Threads)).arg("-smp")
}

// Memory is -m <MiB>.
type Memory struct{ MiB uint64 }

// Args implements Device.
func (m Memory) Args() ([]string, error) {
	if m.MiB == 0 {
		return nil, fmt.Errorf("-m: guest memory must be at least 1 MiB")
	}
	return []string{"-m", strconv.FormatUint(m.MiB, 10)}, nil
}

// Kernel is direct kernel boot. These are whole arguments, not option
// lists: QEMU takes the paths and the command line as they are, so nothing
// is comma-escaped; control characters are refused.
type Kernel struct {
	Kernel, Initrd string // Initrd "" = none
	Append         string // kernel command line; "" = none
}

// Args implements Device.
func (k Kernel) Args() ([]string, error) {
	if k.Kernel == "" {
		return nil, fmt.Errorf("-kernel: no kernel (an initrd needs a kernel)")
	}
	var args []string
	for _, a := range [][2]string{{"-kernel", k.Kernel}, {"-initrd", k.Initrd}, {"-append", k.Append}} {
		if a[1] == "" {
			continue
		}
		if err := CheckArg(a[1]); err != nil {
			return nil, fmt.Errorf("%s: %w", a[0], err)
		}
		args = append(args, a[0], a[1])
	}
	return args, nil
}

// isHelp is what QEMU treats as a request for help instead of a value.
func isHelp(s string) bool { return s == "help" || s == "?" }
