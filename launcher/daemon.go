package launcher

import (
	"errors"
	"fmt"
	"os/exec"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/launcher/unpriv"
)

// daemon is a process the launcher runs next to QEMU for one device
// (virtiofsd for a filesystem, swtpm for the TPM): started before QEMU,
// which connects to it, stopped after QEMU ended; one that ends on its
// own ends the VM.
type daemon struct {
	what string // the device, in messages: "filesystem data", "TPM"
	prog string // the program's short name: "virtiofsd", "swtpm"
	cmd  *exec.Cmd
	out  *tailBuffer
	done chan struct{} // closed once it was reaped; err says how it ended
	err  error
}

func newDaemon(what, prog string) daemon {
	return daemon{what: what, prog: prog, out: newTailBuffer(20, prog+" "+what), done: make(chan struct{})}
}

// startDaemon starts cmd as d: through unpriv in a user namespace of its
// own (root there, QEMU's user on the node: unpriv.Spec.UserNS), no
// supplementary groups, no_new_privs, the VM's SELinux label, in QEMU's
// device cgroup (cgroupFD, -1: none), in a process group of its own, with
// the parent-death signal, its output kept for the reason it ended. Once
// started it is watched: one that ends before the launcher stops it ends
// the VM (helperEnded).
func (l *Launcher) startDaemon(d *daemon, cmd *exec.Cmd, id unpriv.Identity, cgroupFD int) error {
	nsID := unpriv.Identity{UID: id.UID, GID: id.GID}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if cgroupFD >= 0 {
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, cgroupFD
	}
	cmd.Stdout, cmd.Stderr = d.out, d.out
	if cmd.Dir == "" {
		cmd.Dir = "/"
	}
	exited, err := unpriv.Start(cmd, unpriv.Spec{Identity: nsID, Umask: 0o022, SELinuxLabel: l.label.Process, UserNS: true})
	if err != nil {
		return err
	}
	d.cmd = cmd
	go func() {
		d.err = <-exited
		close(d.done)
		l.helperEnded(d.what, d.prog, d.err, d.out)
	}()
	return nil
}

// helperEnded: a program QEMU depends on (virtiofsd, swtpm, passt) ended
// before the launcher stopped it: the VM ends, QEMU killed, with this as
// the reason (supervise). what names the VMI's device, prog the program.
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
	klog.ErrorS(nil, "helper ended: stopping the VM", "program", prog, "device", what, "status", status, "vmi", klog.KObj(l.vmi))
	l.killQEMUFor()
}

// stop kills a started daemon's process group and waits until it was
// reaped. The caller has set fsStopping.
func (d *daemon) stop() {
	if d.cmd == nil {
		return
	}
	_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
	<-d.done
}

// killQEMUFor kills QEMU after a daemon ended (l.fsFailure set). QEMU may
// not run yet: exec checks fsFailure once it stored QEMU's pid.
func (l *Launcher) killQEMUFor() {
	if pid := l.qemuPID.Load(); pid > 0 {
		_ = syscall.Kill(-int(pid), syscall.SIGKILL)
	}
}

// filesystemFailure is why a daemon (virtiofsd, swtpm) ended the VM ("":
// none did).
func (l *Launcher) filesystemFailure() string {
	if c := l.fsFailure.Load(); c != nil {
		return *c
	}
	return ""
}

// stopDaemons kills every daemon (QEMU has ended, or never started) and
// waits until each was reaped; the launcher's copies of their sockets are
// closed. Their socket files go with the runtime directory.
func (l *Launcher) stopDaemons() {
	l.fsStopping.Store(true)
	l.stopVirtiofsd()
	l.stopSwtpm()
}
