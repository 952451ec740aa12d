package launcher

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"syscall"

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
	share    storage.Share
	socket   string   // its vhost-user socket in the runtime directory
	listener *os.File // the launcher's copy, until virtiofsd has its own
	cmd      *exec.Cmd
	out      *tailBuffer
	done     chan struct{} // closed once it was reaped; err says how it ended
	err      error
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
		d := &virtiofsd{share: sh, socket: cmdline.FilesystemSocket(l.cfg.Dir, f.Name), done: make(chan struct{}),
			out: newTailBuffer(20, "virtiofsd "+f.Name)}
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

// startVirtiofsd starts each filesystem's virtiofsd, before QEMU: through
// unpriv in a user namespace of its own (root there, QEMU's user on the
// node: unpriv.Spec.UserNS), no_new_privs, the VM's SELinux label, in
// QEMU's device cgroup (cgroupFD, -1: none), with the parent-death signal.
// Each is watched: one that ends while the VM runs ends the VM
// (virtiofsdEnded).
func (l *Launcher) startVirtiofsd(id unpriv.Identity, cgroupFD int) error {
	nsID := unpriv.Identity{UID: id.UID, GID: id.GID} // no supplementary groups
	for _, d := range l.fs {
		cmd := exec.Command(l.cfg.Virtiofsd, virtiofsdArgs(d.share)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if cgroupFD >= 0 {
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, cgroupFD
		}
		cmd.ExtraFiles = []*os.File{d.listener} // fd virtiofsdFD
		cmd.Stdout, cmd.Stderr = d.out, d.out
		cmd.Dir = "/"
		exited, err := unpriv.Start(cmd, unpriv.Spec{Identity: nsID, Umask: 0o022, SELinuxLabel: l.label.Process, UserNS: true})
		d.listener.Close() // virtiofsd has its own copy, or will never run
		d.listener = nil
		if err != nil {
			return fmt.Errorf("launcher: filesystem %s (%s): starting %s: %w", d.share.Name, d.share.Field, l.cfg.Virtiofsd, err)
		}
		d.cmd = cmd
		go func() {
			d.err = <-exited
			close(d.done)
			l.virtiofsdEnded(d)
		}()
		klog.InfoS("virtiofsd started", "filesystem", d.share.Name, "dir", d.share.Dir, "readOnly", d.share.ReadOnly,
			"pid", cmd.Process.Pid, "uid", nsID.UID, "vmi", klog.KObj(l.vmi))
	}
	return nil
}

// virtiofsdEnded: a virtiofsd that ends before the launcher stopped it
// leaves its filesystem dead in the guest: the VM ends (helperEnded).
func (l *Launcher) virtiofsdEnded(d *virtiofsd) {
	l.helperEnded("filesystem "+d.share.Name, "virtiofsd", d.err, d.out)
}

// helperEnded: a program QEMU depends on (virtiofsd, passt) ended before
// the launcher stopped it: the VM ends, QEMU killed, with this as the
// reason (supervise). what names the VMI's device, prog the program.
func (l *Launcher) helperEnded(what, prog string, err error, out *tailBuffer) {
	if l.fsStopping.Load() {
		return
	}
	status := "an unknown status"
	var ee *exec.ExitError
	switch {
	case err == nil:
		status = "status 0"
	case errors.As(err, &ee):
		status = ee.ProcessState.String()
	default:
		status = err.Error()
	}
	cause := fmt.Sprintf("%s: %s ended (%s); QEMU was stopped", what, prog, status)
	if s := out.String(); s != "" {
		cause += ": " + s
	}
	if !l.fsFailure.CompareAndSwap(nil, &cause) {
		return
	}
	klog.ErrorS(nil, prog+" ended: stopping the VM", "device", what, "status", status, "vmi", klog.KObj(l.vmi))
	l.killQEMUFor()
}

// killQEMUFor kills QEMU after a virtiofsd ended (l.fsFailure set). QEMU
// may not run yet: exec checks fsFailure once it stored QEMU's pid.
func (l *Launcher) killQEMUFor() {
	if pid := l.qemuPID.Load(); pid > 0 {
		_ = syscall.Kill(-int(pid), syscall.SIGKILL)
	}
}

// filesystemFailure is why a virtiofsd ended the VM ("": none did).
func (l *Launcher) filesystemFailure() string {
	if c := l.fsFailure.Load(); c != nil {
		return *c
	}
	return ""
}

// stopVirtiofsd kills every virtiofsd (QEMU has ended, or never started)
// and waits until each was reaped; the launcher's copies of their sockets
// are closed. Their socket files go with the runtime directory.
func (l *Launcher) stopVirtiofsd() {
	l.fsStopping.Store(true)
	for _, d := range l.fs {
		if d.listener != nil {
			d.listener.Close()
			d.listener = nil
		}
		if d.cmd == nil {
			continue
		}
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		<-d.done
	}
}
