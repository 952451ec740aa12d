package cmdline

import (
	"fmt"

	"github.com/google/uuid"
)

// Device is one QEMU device or option: it renders its own arguments
// (the kata-containers govmm idea). Args never panics; an error names the
// QEMU option at fault.
type Device interface {
	Args() ([]string, error)
}

// Flags are constant arguments, rendered as they are (e.g. "-S").
type Flags []string

// Args implements Device.
func (f Flags) Args() ([]string, error) { return append([]string(nil), f...), nil }

// BaseFlags start every command line: CPUs stopped until the launcher says
// cont, no default devices, no config files, no display.
var BaseFlags = Flags{"-S", "-nodefaults", "-no-user-config", "-display", "none"}

// Name is -name guest=<Guest>,debug-threads=on (threads named per vCPU).
type Name struct{ Guest string }

// Args implements Device.
func (n Name) Args() ([]string, error) {
	return newOpts("").add("guest", n.Guest).add("debug-threads", "on").arg("-name")
}

// UUID is -uuid, the SMBIOS system UUID.
type UUID string

// Args implements Device.
func (u UUID) Args() ([]string, error) {
	if _, err := uuid.Parse(string(u)); err != nil {
		return nil, fmt.Errorf("-uuid %q: not a UUID", string(u))
	}
	return []string{"-uuid", string(u)}, nil
}

// SMBIOSSystem is -smbios type=1 (the system information table).
type SMBIOSSystem struct{ Serial, UUID string }

// Args implements Device.
func (s SMBIOSSystem) Args() ([]string, error) {
	return newOpts("").add("type", "1").addNonEmpty("serial", s.Serial).addNonEmpty("uuid", s.UUID).arg("-smbios")
}

// Sandbox is QEMU's seccomp filter, everything denied that a VM does not need.
type Sandbox struct{}

// Args implements Device.
func (Sandbox) Args() ([]string, error) {
	return newOpts("on").add("obsolete", "deny").add("elevateprivileges", "deny").
		add("spawn", "deny").add("resourcecontrol", "deny").arg("-sandbox")
}

// MsgTimestamps prefixes QEMU's error messages with a timestamp.
type MsgTimestamps struct{}

// Args implements Device.
func (MsgTimestamps) Args() ([]string, error) { return newOpts("").add("timestamp", "on").arg("-msg") }

// Boot is -boot; Strict makes devices without a bootindex unbootable
// whenever some device has one (KubeVirt's bootOrder rule, as libvirt does).
type Boot struct{ Strict bool }

// Args implements Device.
func (b Boot) Args() ([]string, error) {
	o := newOpts("")
	if b.Strict {
		o.add("strict", "on")
	} else {
		o.add("strict", "off")
	}
	return o.arg("-boot")
}

// Global is -global driver=D,property=P,value=V.
type Global struct{ Driver, Property, Value string }

// Args implements Device.
func (g Global) Args() ([]string, error) {
	return newOpts("").add("driver", g.Driver).add("property", g.Property).add("value", g.Value).arg("-global")
}

// Incoming is -incoming <URI>; "defer" waits for QMP migrate-incoming.
type Incoming struct{ URI string }

// Args implements Device.
func (i Incoming) Args() ([]string, error) {
	if err := CheckArg(i.URI); err != nil || i.URI == "" {
		return nil, fmt.Errorf("-incoming: bad URI %q", i.URI)
	}
	return []string{"-incoming", i.URI}, nil
}

// RNG is a virtio-rng device fed by a host file (/dev/urandom).
type RNG struct{ ID, Filename string }

// Args implements Device.
func (r RNG) Args() ([]string, error) {
	obj, err := newOpts("rng-random").add("id", r.ID).add("filename", r.Filename).arg("-object")
	if err != nil {
		return nil, err
	}
	dev, err := newOpts("virtio-rng-pci").add("rng", r.ID).arg("-device")
	if err != nil {
		return nil, err
	}
	return append(obj, dev...), nil
}

// Balloon is a virtio memory balloon.
type Balloon struct{ ID string }

// Args implements Device.
func (b Balloon) Args() ([]string, error) {
	return newOpts("virtio-balloon-pci").add("id", b.ID).arg("-device")
}
