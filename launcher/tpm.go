package launcher

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/api/launcherpod"
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

// swtpmStateFD is the fd at which swtpm inherits a persistent state's
// directory, the one persistentState checked: its --tpmstate is
// /proc/self/fd/4, so swtpm works in exactly that directory (whatever the
// claim's paths become) and needs no search permission on the claim's
// root, whoever owns it.
const swtpmStateFD = 4

// swtpmStateDir is the TPM's state directory in the runtime directory: it
// lives as long as the VMI (a TPM that is not persistent).
const swtpmStateDir = "swtpm-state"

// swtpm is the daemon that emulates the VM's TPM 2.0.
type swtpm struct {
	daemon
	socket   string   // its control socket in the runtime directory
	state    string   // its state directory
	listener *os.File // the launcher's copy, until swtpm has its own
	// persistent: the state is on the backend storage (persistentState),
	// reused says a state was found there (swtpm goes on with it).
	persistent, reused bool
	// stateFiles are the persistent state's directory and files, opened
	// without following symlinks, until grantTPM gave them to swtpm's
	// user.
	stateFiles []*os.File
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
	if v1.HasPersistentTPM(&l.vmi.Spec) {
		t.persistent = true
		t.state = filepath.Join(l.cfg.VMStateDir, launcherpod.SwtpmStateSubdir)
		var err error
		if t.stateFiles, t.reused, err = persistentState(l.cfg.VMStateDir); err != nil {
			return fmt.Errorf("launcher: TPM (spec.domain.devices.tpm.persistent): state on the backend storage %s: %w", l.cfg.VMStateDir, err)
		}
		klog.InfoS("TPM state on the backend storage", "dir", t.state, "reused", t.reused, "vmi", klog.KObj(l.vmi))
	} else if err := os.Mkdir(t.state, 0o700); err != nil {
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

// grantTPM gives swtpm (QEMU's user on the node) its state directory (a
// persistent state's files too: through the descriptors persistentState
// opened, never a path) and lets QEMU's group connect to the control
// socket (root:<group> 0660).
func (l *Launcher) grantTPM(id unpriv.Identity) error {
	if l.tpm == nil {
		return nil
	}
	if l.tpm.persistent {
		defer l.tpm.closeEntries()
		for _, f := range l.tpm.stateFiles {
			// fchownat(fd, "", AT_EMPTY_PATH): the descriptor's own file
			// (entries are O_PATH descriptors, which fchown refuses).
			if err := unix.Fchownat(int(f.Fd()), "", id.UID, id.GID, unix.AT_EMPTY_PATH); err != nil {
				return fmt.Errorf("launcher: TPM: persistent state for swtpm: %s: %w", f.Name(), err)
			}
		}
	} else if err := os.Chown(l.tpm.state, id.UID, id.GID); err != nil {
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
	state := t.state
	files := []*os.File{t.listener} // fd swtpmCtrlFD
	if t.persistent {
		if len(t.stateFiles) == 0 {
			return fmt.Errorf("launcher: TPM (spec.domain.devices.tpm.persistent): the state's directory is not open")
		}
		files = append(files, t.stateFiles[0]) // fd swtpmStateFD
		state = fmt.Sprintf("/proc/self/fd/%d", swtpmStateFD)
	}
	cmd := exec.Command(l.cfg.Swtpm, swtpmArgs(state)...)
	cmd.ExtraFiles = files
	err := l.startDaemon(&t.daemon, cmd, id, cgroupFD)
	t.listener.Close() // swtpm has its own copy, or will never run
	t.listener = nil
	t.closeState()
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
	t.closeState()
	t.stop()
}

func (t *swtpm) closeState() {
	for _, f := range t.stateFiles {
		f.Close()
	}
	t.stateFiles = nil
}

// closeEntries closes the state's entries, keeping its directory for
// swtpm to inherit (swtpmStateFD).
func (t *swtpm) closeEntries() {
	if len(t.stateFiles) > 1 {
		for _, f := range t.stateFiles[1:] {
			f.Close()
		}
		t.stateFiles = t.stateFiles[:1]
	}
}

// Bounds of a persistent TPM's state directory: swtpm keeps a handful of
// files there (tpm2-00.permall, tpm2-00.volatilestate, tpm2-00.savestate,
// .lock), each a few KiB to some hundred KiB (libtpms' NV memory). Anything
// beyond is not swtpm's.
const (
	maxSwtpmStateFiles    = 16
	maxSwtpmStateFileSize = 4 << 20
)

// persistentState prepares swtpm's state directory on the backend storage
// root: <root>/swtpm (launcherpod.SwtpmStateSubdir), made 0700 when absent
// (a first start: swtpm creates a fresh TPM there, and every later start
// goes on with it); reused says tpm2-00.permall, the TPM's permanent
// state, was there. Whoever can write the claim (the namespace's users,
// through another Pod) is untrusted, and the launcher is root: nothing in
// it is followed or opened by path beyond root's own directory — the
// directory and each entry are opened relative to their parent with
// O_NOFOLLOW (entries O_PATH: never opened for I/O), and must be a
// directory and at most maxSwtpmStateFiles regular files, each of one
// link and at most maxSwtpmStateFileSize bytes (a symbolic link, a
// device, a FIFO, a subdirectory, a hard link refuse the start, naming
// it). The returned files (the directory first) are what grantTPM gives
// to swtpm's user, by descriptor.
func persistentState(root string) (files []*os.File, reused bool, err error) {
	defer func() {
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			files = nil
		}
	}()
	rootFD, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false, &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(rootFD)
	const sub = launcherpod.SwtpmStateSubdir
	if err := unix.Mkdirat(rootFD, sub, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, false, &os.PathError{Op: "mkdir", Path: sub, Err: err}
	}
	dfd, err := unix.Openat(rootFD, sub, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false, fmt.Errorf("%s must be a directory: %w", sub, err)
	}
	dir := os.NewFile(uintptr(dfd), filepath.Join(root, sub))
	files = append(files, dir)
	if err := unix.Fchmod(dfd, 0o700); err != nil {
		return files, false, &os.PathError{Op: "chmod", Path: sub, Err: err}
	}
	names, err := dir.Readdirnames(maxSwtpmStateFiles + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return files, false, &os.PathError{Op: "readdir", Path: sub, Err: err}
	}
	if len(names) > maxSwtpmStateFiles {
		return files, false, fmt.Errorf("%s holds more than %d entries: not swtpm's state", sub, maxSwtpmStateFiles)
	}
	for _, name := range names {
		p := sub + "/" + name
		// O_PATH: the entry is looked at, never opened for I/O (a device
		// or a FIFO swapped in after the check would be opened with
		// effects).
		fd, err := unix.Openat(dfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return files, false, &os.PathError{Op: "open", Path: p, Err: err}
		}
		f := os.NewFile(uintptr(fd), filepath.Join(root, p))
		files = append(files, f)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return files, false, &os.PathError{Op: "stat", Path: p, Err: err}
		}
		switch {
		case st.Mode&unix.S_IFMT != unix.S_IFREG:
			return files, false, fmt.Errorf("%s: not a regular file (mode %#o): not swtpm's state", p, st.Mode)
		case st.Nlink != 1:
			// A hard link to a file elsewhere on the claim's file system
			// (a hostPath provisioner's: the node's) would be given away.
			return files, false, fmt.Errorf("%s: %d hard links: not swtpm's state", p, st.Nlink)
		case st.Size > maxSwtpmStateFileSize:
			return files, false, fmt.Errorf("%s: %d bytes, more than swtpm's state (at most %d)", p, st.Size, maxSwtpmStateFileSize)
		}
		if name == swtpmPermanentState {
			reused = true
		}
	}
	return files, reused, nil
}

// swtpmPermanentState is the file of a TPM 2.0's permanent state in
// swtpm's state directory (its seeds, hierarchies, NV indices,
// persistent objects).
const swtpmPermanentState = "tpm2-00.permall"
