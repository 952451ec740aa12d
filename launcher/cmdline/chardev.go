package cmdline

import (
	"fmt"
	"strconv"
)

// MaxSocketPath is the longest unix socket path (sun_path holds 108 bytes
// with the terminating NUL).
const MaxSocketPath = 107

// SocketChardev is a listening unix socket chardev that does not wait for
// a client: -chardev socket,id=ID,path=PATH,server=on,wait=off, or, with
// FD, on a socket the launcher made and QEMU inherited, already listening
// (fd=FD): the launcher connects as soon as QEMU started, without polling
// for the path to appear.
type SocketChardev struct {
	ID, Path string
	FD       int
}

// Args implements Device.
func (c SocketChardev) Args() ([]string, error) {
	o := newOpts("socket").add("id", c.ID)
	switch {
	case c.FD != 0 && c.Path != "":
		return nil, fmt.Errorf("-chardev %s: a socket path and an fd", c.ID)
	case c.FD != 0:
		if c.FD < 3 {
			return nil, fmt.Errorf("-chardev %s: fd %d is not an inherited one (3 or more)", c.ID, c.FD)
		}
		o.add("fd", strconv.Itoa(c.FD))
	case c.Path == "":
		return nil, fmt.Errorf("-chardev %s: no socket path", c.ID)
	case len(c.Path) > MaxSocketPath:
		return nil, fmt.Errorf("-chardev %s: socket path is %d bytes, longer than %d", c.ID, len(c.Path), MaxSocketPath)
	default:
		o.add("path", c.Path)
	}
	return o.add("server", "on").add("wait", "off").arg("-chardev")
}

// QMPMonitor is a QMP monitor on a chardev.
type QMPMonitor struct{ Chardev string }

// Args implements Device.
func (m QMPMonitor) Args() ([]string, error) {
	return newOpts("").add("chardev", m.Chardev).add("mode", "control").arg("-mon")
}

// SerialPort is the first serial port (ttyS0) on a chardev.
type SerialPort struct{ Chardev string }

// Args implements Device.
func (s SerialPort) Args() ([]string, error) {
	if !idPattern.MatchString(s.Chardev) {
		return nil, fmt.Errorf("-serial: bad chardev id %q", s.Chardev)
	}
	return []string{"-serial", "chardev:" + s.Chardev}, nil
}

// VirtioSerial is a virtio-serial controller; its bus is "<ID>.0".
type VirtioSerial struct{ ID string }

// Args implements Device.
func (v VirtioSerial) Args() ([]string, error) {
	return newOpts("virtio-serial-pci").add("id", v.ID).arg("-device")
}

// VirtSerialPort is a named port on a virtio-serial bus, e.g. the guest
// agent's org.qemu.guest_agent.0.
type VirtSerialPort struct{ Bus, Chardev, Name string }

// Args implements Device.
func (p VirtSerialPort) Args() ([]string, error) {
	return newOpts("virtserialport").add("bus", p.Bus).add("chardev", p.Chardev).add("name", p.Name).arg("-device")
}
