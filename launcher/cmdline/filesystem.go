package cmdline

import (
	"fmt"
	"path/filepath"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// GuestMemoryID is the id of the guest memory's backend object when the
// memory is shared (a VMI with filesystems).
const GuestMemoryID = "mem"

// SharedMemory is guest memory that another process may map: -object
// memory-backend-memfd,id=ID,size=<MiB>M,share=on, named by -machine
// memory-backend=ID (Machine.MemoryBackend). vhost-user devices
// (virtiofsd) read and write the guest's buffers in it.
type SharedMemory struct {
	ID  string
	MiB uint64
}

// Args implements Device.
func (m SharedMemory) Args() ([]string, error) {
	if m.MiB < 1 {
		return nil, fmt.Errorf("-object memory-backend-memfd: size must be at least 1 MiB")
	}
	if !idPattern.MatchString(m.ID) {
		return nil, fmt.Errorf("-object memory-backend-memfd: bad id %q", m.ID)
	}
	return newOpts("memory-backend-memfd").add("id", m.ID).add("size", fmt.Sprintf("%dM", m.MiB)).add("share", "on").arg("-object")
}

// VhostUserFS is a virtio-fs device served by a virtiofsd on a unix socket:
// -chardev socket,id=fs-<Tag>,path=Socket (QEMU connects; virtiofsd
// listens) and -device vhost-user-fs-pci,id=fs-<Tag>,chardev=…,tag=Tag.
type VhostUserFS struct {
	Tag, Socket string
}

// FilesystemID is the chardev and device id of a filesystem.
func FilesystemID(name string) string { return "fs-" + name }

// FilesystemSocket is the vhost-user socket of filesystem name in the VM's
// runtime directory dir.
func FilesystemSocket(dir, name string) string { return filepath.Join(dir, FilesystemID(name)+".sock") }

// Args implements Device.
func (f VhostUserFS) Args() ([]string, error) {
	id := FilesystemID(f.Tag)
	switch {
	case f.Tag == "" || len(f.Tag) > v1.MaxFilesystemTagLength:
		return nil, fmt.Errorf("vhost-user-fs-pci: tag %q must be 1 to %d bytes", f.Tag, v1.MaxFilesystemTagLength)
	case !idPattern.MatchString(id):
		return nil, fmt.Errorf("vhost-user-fs-pci: bad tag %q", f.Tag)
	case f.Socket == "":
		return nil, fmt.Errorf("vhost-user-fs-pci %s: no socket path", f.Tag)
	case len(f.Socket) > MaxSocketPath:
		return nil, fmt.Errorf("vhost-user-fs-pci %s: socket path is %d bytes, longer than %d", f.Tag, len(f.Socket), MaxSocketPath)
	}
	chr, err := newOpts("socket").add("id", id).add("path", f.Socket).arg("-chardev")
	if err != nil {
		return nil, err
	}
	dev, err := newOpts("vhost-user-fs-pci").add("id", id).add("chardev", id).add("tag", f.Tag).arg("-device")
	if err != nil {
		return nil, err
	}
	return append(chr, dev...), nil
}

// filesystems: one vhost-user-fs-pci per filesystem, its socket in the
// runtime directory (Paths.Dir).
func (b *builder) filesystems() {
	for i, f := range b.vmi.Spec.Domain.Devices.Filesystems {
		path := fmt.Sprintf("spec.domain.devices.filesystems[%d]", i)
		if b.in.Paths.Dir == "" {
			b.fail("Paths.Dir", "required for filesystems (their virtiofsd sockets)")
			return
		}
		b.add(path, VhostUserFS{Tag: b.val(path+".name", f.Name), Socket: b.socket(path, FilesystemSocket(b.in.Paths.Dir, f.Name))})
	}
}
