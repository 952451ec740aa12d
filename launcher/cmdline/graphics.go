package cmdline

import (
	"fmt"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// VGAMemoryMB is the VGA device's video memory: KubeVirt's 16 MiB vram
// (libvirt renders vram='16384' as vgamem_mb=16).
const VGAMemoryMB = 16

// VGA is the standard VGA video device (KubeVirt's default "vga" model).
type VGA struct {
	ID       string
	MemoryMB int
}

// Args implements Device.
func (v VGA) Args() ([]string, error) {
	if v.MemoryMB <= 0 {
		return nil, fmt.Errorf("-device VGA: video memory %d MiB", v.MemoryMB)
	}
	return newOpts("VGA").add("id", v.ID).addInt("vgamem_mb", v.MemoryMB).arg("-device")
}

// VNC is QEMU's VNC server listening on a unix socket only (no TCP port):
// -vnc vnc=unix:PATH,share=force-shared (the display named by its key, as
// libvirt renders it, so a path is never read as an option; every client
// shares the screen, so no client's ClientInit can disconnect the others). QEMU creates the socket like its chardev sockets, in the
// runtime directory only the launcher and QEMU's user may enter.
type VNC struct{ Path string }

// Args implements Device.
func (v VNC) Args() ([]string, error) {
	if v.Path == "" {
		return nil, fmt.Errorf("-vnc: no socket path")
	}
	if len(v.Path) > MaxSocketPath {
		return nil, fmt.Errorf("-vnc: socket path is %d bytes, longer than %d", len(v.Path), MaxSocketPath)
	}
	return newOpts("").add("vnc", "unix:"+v.Path).add("share", "force-shared").arg("-vnc")
}

// HasGraphics says whether the VMI gets a graphics device and a VNC server:
// spec.domain.devices.autoattachGraphicsDevice nil (KubeVirt's default) or true.
func HasGraphics(devs *v1.Devices) bool {
	return devs.AutoattachGraphicsDevice == nil || *devs.AutoattachGraphicsDevice
}

// graphics: the VGA device and its VNC server.
func (b *builder) graphics() {
	if !HasGraphics(&b.vmi.Spec.Domain.Devices) {
		return
	}
	const src = "spec.domain.devices.autoattachGraphicsDevice"
	if b.in.Paths.VNC == "" {
		b.fail("Paths.VNC", "required by %s", src)
	}
	b.add(src, VGA{ID: VideoID, MemoryMB: VGAMemoryMB}, VNC{Path: b.socket("Paths.VNC", b.in.Paths.VNC)})
}
