package launcher

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"

	"k8s.io/klog/v2"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/launcher/cmdline"
	"github.com/kemu-dev/kemu/launcher/unpriv"
)

// DefaultSwtpm is the swtpm the launcher runs for domain.devices.tpm
// (Config.Swtpm): Debian's swtpm package (the launcher image has it,
// hack/images).
const DefaultSwtpm = "/usr/bin/swtpm"

// swtpmCtrlFD is the fd at which swtpm inherits its listening control
// socket (--ctrl type=unixio,fd=…).
const swtpmCtrlFD = 3

// swtpmStateDir is the TPM's state directory in the runtime directory: it
// lives as long as the VMI (a TPM that is not persistent).
const swtpmStateDir = "swtpm-state"

// swtpm is the daemon that emulates the VM's TPM 2.0.
type swtpm struct {
	daemon
	socket   string   // its control socket in the runtime directory
	state    string   // its state directory
	listener *os.File // the launcher's copy, until swtpm has its own
}

// listenTPM makes the TPM's state directory and swtpm's control socket in
// the runtime directory, listening, for swtpm to inherit: QEMU connects
// the moment it starts, whether or not swtpm accepts yet. Nothing without
// a TPM (domain.devices.tpm absent or enabled: false).
func (l *Launcher) listenTPM() error {
	if !v1.HasTPM(&l.vmi.Spec) {
		return nil
	}
	t := &swtpm{daemon: newDaemon("TPM", "swtpm"), socket: cmdline.TPMSocket(l.cfg.Dir), state: filepath.Join(l.cfg.Dir, swtpmStateDir)}
	l.tpm = t // closed by stopSwtpm, whatever happens next
	if err := os.Mkdir(t.state, 0o700); err != nil {
		return fmt.Errorf("launcher: TPM: state directory: %w", err)
	}
	if err := os.Remove(t.socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("launcher: TPM: socket: %w", err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: t.socket, Net: "unix"})
	if err != nil {
		return fmt.Errorf("launcher: TPM: socket: %w", err)
	}
	ln.SetUnlinkOnClose(false)
	t.listener, err = ln.File()
	ln.Close()
	if err == nil {
		err = os.Chmod(t.socket, 0o600)
	}
	if err != nil {
		return fmt.Errorf("launcher: TPM: socket: %w", err)
	}
	return nil
}

// grantTPM gives swtpm (QEMU's user on the node) its state directory and
// lets QEMU's group connect to the control socket (root:<group> 0660).
func (l *Launcher) grantTPM(id unpriv.Identity) error {
	if l.tpm == nil {
		return nil
	}
	if err := os.Chown(l.tpm.state, id.UID, id.GID); err != nil {
		return fmt.Errorf("launcher: TPM: state directory for swtpm: %w", err)
	}
	if err := os.Chown(l.tpm.socket, 0, id.GID); err != nil {
		return fmt.Errorf("launcher: TPM: socket for QEMU: %w", err)
	}
	if err := os.Chmod(l.tpm.socket, 0o660); err != nil {
		return fmt.Errorf("launcher: TPM: socket for QEMU: %w", err)
	}
	return nil
}

// swtpmArgs is swtpm's command line: a TPM 2.0 whose control channel is
// the inherited socket (QEMU's tpm-emulator backend hands it the data
// channel), its state in dir; its errors go to stderr (kept for the reason
// it ended; swtpm 0.7 exits silently with --log fd=2). No --terminate: the launcher stops it after QEMU, so its end
// while QEMU runs is always a failure. The TPM is not manufactured
// (no swtpm_setup: no EK certificates, see docs/launcher.md).
func swtpmArgs(dir string) []string {
	return []string{"socket", "--tpm2", "--ctrl", fmt.Sprintf("type=unixio,fd=%d", swtpmCtrlFD),
		"--tpmstate", "dir=" + dir + ",mode=0600"}
}

// startSwtpm starts the TPM's swtpm, before QEMU, as a supervised daemon
// (startDaemon: QEMU's user in a user namespace of its own, no_new_privs,
// the VM's SELinux label, QEMU's device cgroup); its death ends the VM.
func (l *Launcher) startSwtpm(id unpriv.Identity, cgroupFD int) error {
	t := l.tpm
	if t == nil {
		return nil
	}
	cmd := exec.Command(l.cfg.Swtpm, swtpmArgs(t.state)...)
	cmd.ExtraFiles = []*os.File{t.listener} // fd swtpmCtrlFD
	err := l.startDaemon(&t.daemon, cmd, id, cgroupFD)
	t.listener.Close() // swtpm has its own copy, or will never run
	t.listener = nil
	if err != nil {
		return fmt.Errorf("launcher: TPM (spec.domain.devices.tpm): starting %s: %w", l.cfg.Swtpm, err)
	}
	klog.InfoS("swtpm started", "state", t.state, "pid", cmd.Process.Pid, "vmi", klog.KObj(l.vmi))
	return nil
}

// stopSwtpm kills swtpm and waits until it was reaped (stopDaemons); the
// launcher's copy of its socket is closed. Its state goes with the
// runtime directory.
func (l *Launcher) stopSwtpm() {
	t := l.tpm
	if t == nil {
		return
	}
	if t.listener != nil {
		t.listener.Close()
		t.listener = nil
	}
	t.stop()
}
