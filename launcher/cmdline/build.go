package cmdline

import (
	"errors"
	"fmt"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// Build turns a defaulted, validated VMI plus this node's facts and the
// launcher's prepared inputs into QEMU's argv, without the binary. Every
// error names the VMI field (spec.…) or the input (Input.…, Facts.…,
// Paths.…) at fault.
func Build(in Input) ([]string, error) {
	devs, err := devices(in)
	if err != nil {
		return nil, err
	}
	var argv []string
	for _, d := range devs {
		a, err := d.dev.Args()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d.src, err)
		}
		argv = append(argv, a...)
	}
	return argv, nil
}

// sourced is a device and the field or input it comes from, for errors.
type sourced struct {
	src string
	dev Device
}

type builder struct {
	in   Input
	vmi  *v1.VirtualMachineInstance
	devs []sourced
	err  error
	ids  map[string]string // QEMU device id -> the field it came from
	// timers: spec.domain.clock.timer's changes to -machine and -cpu.
	timers timers
}

func (b *builder) add(src string, d ...Device) {
	for _, dev := range d {
		b.devs = append(b.devs, sourced{src, dev})
	}
}

// fail records the first error.
func (b *builder) fail(path, format string, a ...any) {
	if b.err == nil {
		b.err = fmt.Errorf("%s: %s", path, fmt.Sprintf(format, a...))
	}
}

// val checks a value bound for an option list now, so the error names its
// field; the device escapes it when rendering.
func (b *builder) val(path, v string) string {
	if _, err := Escape(v); err != nil {
		b.fail(path, "%v", err)
	}
	return v
}

// arg checks a value passed as a whole argument.
func (b *builder) arg(path, v string) string {
	if err := CheckArg(v); err != nil {
		b.fail(path, "%v", err)
	}
	return v
}

// claimID reserves a QEMU device id.
func (b *builder) claimID(id, path string) {
	if other, dup := b.ids[id]; dup {
		b.fail(path, "QEMU device id %q is also the id of %s; disk and interface names must differ", id, other)
	}
	b.ids[id] = path
}

func devices(in Input) ([]sourced, error) {
	if in.VMI == nil {
		return nil, errors.New("Input.VMI: nil")
	}
	b := &builder{in: in, vmi: in.VMI, ids: map[string]string{}}
	d := &in.VMI.Spec.Domain
	switch {
	case d.Machine == nil || d.Machine.Type == "":
		return nil, errors.New("spec.domain.machine.type: not set; Build needs a defaulted VMI")
	case d.CPU == nil:
		return nil, errors.New("spec.domain.cpu: not set; Build needs a defaulted VMI")
	case d.Memory == nil || d.Memory.Guest == nil:
		return nil, errors.New("spec.domain.memory.guest: not set; Build needs a defaulted VMI")
	}
	b.identity()
	b.add("base", BaseFlags, Sandbox{}, MsgTimestamps{})
	b.planTimers()
	b.machine()
	b.cpuAndMemory()
	b.kernel()
	b.chardevs()
	b.disks()
	b.nics()
	b.filesystems()
	b.tpm()
	b.graphics()
	b.clock()
	b.watchdogAndInputs()
	if d.Devices.Rng != nil {
		b.add("spec.domain.devices.rng", RNG{ID: RNGID, Filename: "/dev/urandom"})
	}
	if BalloonAttached(d) {
		b.add("spec.domain.devices.autoattachMemBalloon", Balloon{ID: BalloonID})
	}
	if in.Incoming {
		b.add("Input.Incoming", Incoming{URI: "defer"})
	}
	if b.err != nil {
		return nil, b.err
	}
	return b.devs, nil
}

// BalloonAttached says whether the domain gets a virtio memory balloon
// (spec.domain.devices.autoattachMemBalloon, default true).
func BalloonAttached(d *v1.DomainSpec) bool {
	on := d.Devices.AutoattachMemBalloon
	return on == nil || *on
}
