package launcher

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/launcher/unpriv"
	"github.com/kemu-dev/kemu/netsetup"
)

// DefaultPasst is the passt the launcher runs for each passt-bound
// interface (Config.Passt): Debian's package (hack/install-deps.sh, the
// launcher image).
const DefaultPasst = "/usr/bin/passt"

// passtFD is the fd at which passt inherits its end of the socket pair
// (--fd).
const passtFD = 3

// passtQuitGrace is how long after passt ended with status 0 (QEMU closed
// its end of the socket) QEMU may take to exit before the launcher counts
// passt's end as a failure.
const passtQuitGrace = 5 * time.Second

// passtProc is the passt serving one interface.
type passtProc struct {
	iface string
	conf  netsetup.PasstConfig
	peer  *os.File // passt's end of the socket pair, until passt has its own
	qemu  *os.File // QEMU's end, until QEMU has its own (closePasstQEMUEnds)
	cmd   *exec.Cmd
	out   *tailBuffer
	done  chan struct{} // closed once it was reaped; err says how it ended
	err   error
}

// passtSocket makes the connected socket pair between QEMU (-netdev
// stream,addr.type=fd) and passt (--fd) for a passt-bound interface: no
// socket file anyone else could connect to, and nothing to clean up.
// QEMU's end is returned (the caller hands it to QEMU); passt's is kept
// for startPasst.
func (l *Launcher) passtSocket(name string, conf netsetup.PasstConfig) (*os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("launcher: interface %s: passt's socket pair: %w", name, err)
	}
	qemu := os.NewFile(uintptr(fds[0]), "passt-"+name+"-qemu")
	l.passt = append(l.passt, &passtProc{iface: name, conf: conf, peer: os.NewFile(uintptr(fds[1]), "passt-"+name),
		qemu: qemu, out: newTailBuffer(20, "passt "+name), done: make(chan struct{})})
	return qemu, nil
}

// closePasstQEMUEnds closes the launcher's copies of QEMU's ends once QEMU
// has its own (or will never start).
func (l *Launcher) closePasstQEMUEnds() {
	for _, p := range l.passt {
		if p.qemu != nil {
			p.qemu.Close()
			p.qemu = nil
		}
	}
}

// startPasst starts each passt-bound interface's passt, before QEMU: as
// QEMU's user (no user namespace: passt needs no privilege, and sandboxes
// itself), no capabilities, no_new_privs, the VM's SELinux label, with the
// parent-death signal, in the pod's network namespace. Each is watched: one
// that ends while the VM runs ends the VM (helperEnded).
func (l *Launcher) startPasst(id unpriv.Identity) error {
	netns := ""
	if l.cfg.PodNetwork != nil {
		netns = l.cfg.PodNetwork.NetNSPath
	}
	bin := l.cfg.Passt
	if bin == "" {
		bin = DefaultPasst
	}
	for _, p := range l.passt {
		cmd := exec.Command(bin, p.conf.Args(passtFD)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		cmd.ExtraFiles = []*os.File{p.peer} // fd passtFD
		cmd.Stdout, cmd.Stderr = p.out, p.out
		cmd.Dir = "/"
		exited, err := unpriv.Start(cmd, unpriv.Spec{Identity: unpriv.Identity{UID: id.UID, GID: id.GID},
			Umask: 0o077, SELinuxLabel: l.label.Process, NetNS: netns})
		p.peer.Close() // passt has its own copy, or will never run
		p.peer = nil
		if err != nil {
			return fmt.Errorf("launcher: interface %s: starting %s: %w", p.iface, bin, err)
		}
		p.cmd = cmd
		go func() {
			p.err = <-exited
			close(p.done)
			if p.err == nil {
				// passt ends by itself, status 0, when QEMU closes its
				// end: QEMU is ending. Only if QEMU goes on is it a failure.
				select {
				case <-l.exited:
					return
				case <-time.After(passtQuitGrace):
				}
			}
			l.helperEnded("interface "+p.iface, "passt", p.err, p.out)
		}()
		klog.InfoS("passt started", "interface", p.iface, "podInterface", p.conf.PodInterface, "ports", len(p.conf.Ports),
			"pid", cmd.Process.Pid, "uid", id.UID, "vmi", klog.KObj(l.vmi))
	}
	return nil
}

// stopPasst kills every passt (QEMU has ended, or never started) and waits
// until each was reaped.
func (l *Launcher) stopPasst() {
	l.fsStopping.Store(true)
	l.closePasstQEMUEnds()
	for _, p := range l.passt {
		if p.peer != nil {
			p.peer.Close()
			p.peer = nil
		}
		if p.cmd == nil {
			continue
		}
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}
