package launcher

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"

	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/launcher/cmdline"
	"github.com/kemu-dev/kemu/launcher/storage"
	"github.com/kemu-dev/kemu/launcher/unpriv"
)

// DefaultVirtiofsd is the virtiofsd the launcher runs for each filesystem
// (Config.Virtiofsd): QEMU 7.2's own (C) virtiofsd, which Debian 12's
// qemu-system-common installs there (Debian 12 packages no other; the
// launcher image copies it, hack/images).
const DefaultVirtiofsd = "/usr/lib/qemu/virtiofsd"

// virtiofsdFD is the fd at which virtiofsd inherits its listening
// vhost-user socket (--fd).
const virtiofsdFD = 3

// virtiofsd is the daemon that serves one filesystem.
type virtiofsd struct {
	daemon
	share    storage.Share
	socket   string   // its vhost-user socket in the runtime directory
	listener *os.File // the launcher's copy, until virtiofsd has its own
}

// listenFilesystems makes every filesystem's vhost-user socket in the
// runtime directory, listening, for its virtiofsd to inherit (--fd): QEMU
// connects the moment it starts, whether or not virtiofsd accepts yet, and
// nothing outside the launcher has to create a path. In the order of
// domain.devices.filesystems.
func (l *Launcher) listenFilesystems() error {
	for _, f := range l.vmi.Spec.Domain.Devices.Filesystems {
		sh, ok := l.prepared.Shares[f.Name]
		if !ok {
			return fmt.Errorf("launcher: filesystem %s: its volume was not prepared", f.Name)
		}
		d := &virtiofsd{daemon: newDaemon("filesystem "+f.Name, "virtiofsd"), share: sh, socket: cmdline.FilesystemSocket(l.cfg.Dir, f.Name)}
		if err := os.Remove(d.socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("launcher: filesystem %s: socket: %w", f.Name, err)
		}
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: d.socket, Net: "unix"})
		if err != nil {
			return fmt.Errorf("launcher: filesystem %s: socket: %w", f.Name, err)
		}
		ln.SetUnlinkOnClose(false)
		d.listener, err = ln.File()
		ln.Close()
		if err == nil {
			err = os.Chmod(d.socket, 0o600)
		}
		l.fs = append(l.fs, d) // closed by stopVirtiofsd, whatever happens next
		if err != nil {
			return fmt.Errorf("launcher: filesystem %s: socket: %w", f.Name, err)
		}
	}
	return nil
}

// grantFilesystems lets QEMU's group connect to the vhost-user sockets
// (root:<group> 0660; the launcher made them as root).
func (l *Launcher) grantFilesystems(id unpriv.Identity) error {
	for _, d := range l.fs {
		if err := os.Chown(d.socket, 0, id.GID); err != nil {
			return fmt.Errorf("launcher: filesystem %s: socket for QEMU: %w", d.share.Name, err)
		}
		if err := os.Chmod(d.socket, 0o660); err != nil {
			return fmt.Errorf("launcher: filesystem %s: socket for QEMU: %w", d.share.Name, err)
		}
	}
	return nil
}

// virtiofsdArgs is virtiofsd's command line for a share. C virtiofsd 7.2
// has no sandbox "none": chroot, into the shared directory, which it may
// do as root of its own user namespace (namespace would need a PID
// namespace too, which a launcher Pod's RuntimeDefault seccomp refuses).
// --rlimit-nofile=0 leaves its fd limit alone (raising it needs
// CAP_SYS_RESOURCE on the node). A read-only share is on a read-only
// mount (storage.Share.ReadOnly): 7.2 has no read-only option.
func virtiofsdArgs(sh storage.Share) []string {
	return []string{fmt.Sprintf("--fd=%d", virtiofsdFD), "-o", "source=" + sh.Dir, "-o", "sandbox=chroot",
		"-o", "cache=auto", "--rlimit-nofile=0"}
}

// startVirtiofsd starts each filesystem's virtiofsd, before QEMU, as a
// supervised daemon (startDaemon: QEMU's user in a user namespace of its
// own, no_new_privs, the VM's SELinux label, QEMU's device cgroup).
func (l *Launcher) startVirtiofsd(id unpriv.Identity, cgroupFD int) error {
	for _, d := range l.fs {
		cmd := exec.Command(l.cfg.Virtiofsd, virtiofsdArgs(d.share)...)
		cmd.ExtraFiles = []*os.File{d.listener} // fd virtiofsdFD
		err := l.startDaemon(&d.daemon, cmd, id, cgroupFD)
		d.listener.Close() // virtiofsd has its own copy, or will never run
		d.listener = nil
		if err != nil {
			return fmt.Errorf("launcher: filesystem %s (%s): starting %s: %w", d.share.Name, d.share.Field, l.cfg.Virtiofsd, err)
		}
		klog.InfoS("virtiofsd started", "filesystem", d.share.Name, "dir", d.share.Dir, "readOnly", d.share.ReadOnly,
			"pid", cmd.Process.Pid, "vmi", klog.KObj(l.vmi))
	}
	return nil
}

// stopVirtiofsd kills every virtiofsd and waits until each was reaped
// (stopDaemons); the launcher's copies of their sockets are closed.
func (l *Launcher) stopVirtiofsd() {
	for _, d := range l.fs {
		if d.listener != nil {
			d.listener.Close()
			d.listener = nil
		}
		d.stop()
	}
}
