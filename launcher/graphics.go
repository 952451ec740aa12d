package launcher

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/kemu-dev/kemu/launcher/cmdline"
)

// VNCSocketName is QEMU's VNC server socket in the VM's runtime directory
// (Config.Dir). QEMU creates it as its own user in that directory, which
// only root and QEMU's group may enter (grantQEMU), like its QMP, serial
// and guest agent sockets; only the launcher connects to it.
const VNCSocketName = "vnc.sock"

// ErrNoGraphics: the VM has no graphics device, so no VNC server
// (spec.domain.devices.autoattachGraphicsDevice is false).
var ErrNoGraphics = errors.New("launcher: the VM has no graphics device (spec.domain.devices.autoattachGraphicsDevice is false)")

// HasGraphics says whether the VM has a graphics device and a VNC server.
func (l *Launcher) HasGraphics() bool { return cmdline.HasGraphics(&l.vmi.Spec.Domain.Devices) }

// DialVNC opens a fresh connection to QEMU's VNC server: the caller speaks
// RFB on it and closes it. ErrNoGraphics when the VM has none.
func (l *Launcher) DialVNC(ctx context.Context) (net.Conn, error) {
	if !l.HasGraphics() {
		return nil, ErrNoGraphics
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", l.paths.VNC)
	if err != nil {
		return nil, fmt.Errorf("launcher: connecting to QEMU's VNC server: %w", err)
	}
	return c, nil
}
