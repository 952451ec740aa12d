package launcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/launcher/unpriv"
)

// exec starts QEMU (paused: -S; a migration target's command line also has
// -incoming defer, see prepare) in its own process group, unprivileged
// (launcher/unpriv), with the parent-death signal: the launcher dying takes
// QEMU with it.
func (l *Launcher) exec() error {
	accel, vhostNet := l.accel, l.vhostNet
	id, err := l.qemuIdentity(accel, vhostNet)
	if err != nil {
		return err
	}
	if err := l.grantQEMU(id); err != nil {
		return err
	}
	cmd := exec.Command(l.cfg.QEMU, l.argv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cgroupFD := -1
	if !l.cfg.NoDeviceCgroup {
		// QEMU is cloned straight into its device cgroup (CLONE_INTO_CGROUP):
		// it never runs an instruction outside the allowlist.
		fd, err := l.deviceCgroup(accel, vhostNet)
		if err != nil {
			return err
		}
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
		cgroupFD = fd
	}
	// The filesystems' daemons first (into the same cgroup): QEMU
	// connects to them as it starts.
	if err := l.startVirtiofsd(id, cgroupFD); err != nil {
		return err
	}
	if err := l.startPasst(id); err != nil {
		return err
	}
	if err := l.startSwtpm(id, cgroupFD); err != nil {
		return err
	}
	cmd.Stdout = l.stderr
	cmd.Stderr = l.stderr
	cmd.ExtraFiles = l.files
	cmd.Dir = l.cfg.Dir
	// QEMU's sockets: group-only (the runtime directory is root:QEMU 0770;
	// the launcher reaches them as a member of QEMU's group, see
	// dropcaps.Launcher). unpriv forks from a thread of its own that lives
	// as long as QEMU: its death is QEMU's parent-death signal.
	exited, err := unpriv.Start(cmd, unpriv.Spec{Identity: id, Umask: 0o007, SELinuxLabel: l.label.Process})
	l.closeQMPListener() // QEMU has its own copy, or will never start
	l.closePasstQEMUEnds()
	if err != nil {
		return fmt.Errorf("launcher: starting %s: %w", l.cfg.QEMU, err)
	}
	l.cmd = cmd
	l.qemuPID.Store(int64(cmd.Process.Pid))
	if l.filesystemFailure() != "" {
		l.killQEMUFor() // a virtiofsd ended before QEMU's pid was known
	}
	go func() {
		l.exitErr = <-exited
		close(l.exited)
	}()
	l.state.handle(event{kind: evExec, pid: cmd.Process.Pid, selinuxContext: l.label.Process, deviceCgroup: l.DeviceCgroup()})
	klog.InfoS("QEMU started", "pid", cmd.Process.Pid, "uid", id.UID, "gid", id.GID, "vmi", klog.KObj(l.vmi))
	return nil
}

// supervise waits for QEMU to exit and records how it ended.
func (l *Launcher) supervise() {
	<-l.exited
	code := -1
	var ee *exec.ExitError
	switch {
	case l.exitErr == nil:
		code = 0
	case errors.As(l.exitErr, &ee):
		code = ee.ExitCode()
	}
	msg := fmt.Sprintf("QEMU exited with status %d", code)
	if code == -1 {
		msg = fmt.Sprintf("QEMU ended: %v", l.exitErr)
	}
	if cause := l.filesystemFailure(); cause != "" {
		msg = cause
	}
	l.finish()
	d := l.state.handle(event{kind: evExited, code: code, message: msg, detail: l.stderr.String()})
	klog.InfoS("VM ended", "vmi", klog.KObj(l.vmi), "reason", d.Reason, "message", d.Message)
}

// finish releases everything the VM had: connections, overlays, ISOs,
// sockets, the runtime directory. Idempotent.
func (l *Launcher) finish() {
	l.cleanup.Do(func() {
		l.closeQMPListener()
		// QEMU has ended (or never started): its daemons (virtiofsd, swtpm), its hugepages file and passt go.
		l.stopDaemons()
		l.removeHugepagesDir()
		l.stopPasst()
		l.mu.Lock()
		if l.agent != nil {
			l.agent.Close()
		}
		l.mu.Unlock()
		if l.mon != nil {
			l.mon.Close()
		}
		if l.con != nil {
			l.con.close()
		}
		if l.net != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := l.net.Teardown(ctx); err != nil {
				klog.ErrorS(err, "Removing the VM's pod network wiring")
			}
			cancel()
		}
		if l.netCancel != nil {
			l.netCancel()
		}
		if l.prepared != nil {
			if err := l.prepared.Cleanup(); err != nil {
				klog.ErrorS(err, "Removing the VM's volumes")
			}
		}
		if l.cgroup != nil {
			// QEMU has exited; anything left in its cgroup (a process it
			// spawned outside its process group) must not outlive it.
			if procs, err := l.cgroup.Procs(); err == nil && len(procs) > 0 {
				klog.InfoS("Killing processes left in QEMU's cgroup", "cgroup", l.cgroup.Path(), "pids", procs)
				if err := l.cgroup.Kill(); err != nil {
					klog.ErrorS(err, "Killing QEMU's cgroup")
				}
			}
			if err := l.cgroup.Remove(); err != nil {
				klog.ErrorS(err, "Removing QEMU's device cgroup", "cgroup", l.cgroup.Path())
			}
		}
		if err := os.RemoveAll(l.cfg.Dir); err != nil {
			klog.ErrorS(err, "Removing the runtime directory", "dir", l.cfg.Dir)
		}
		close(l.finished)
	})
}

// Wait blocks until QEMU ended and everything is cleaned up, then returns
// the final state.
func (l *Launcher) Wait(ctx context.Context) (Domain, error) {
	select {
	case <-l.finished:
		if l.cmd != nil {
			<-l.exited
		}
		// supervise records Shutoff right after finish.
		return l.Watch(true).WaitFor(ctx, InState(StateShutoff))
	case <-ctx.Done():
		return l.Domain(), ctx.Err()
	}
}

// Stop asks QEMU to quit at once (no guest shutdown) and kills it if it
// has not exited within 5 s.
func (l *Launcher) Stop(ctx context.Context) (Domain, error) {
	l.state.handle(event{kind: evHostRequested})
	qctx, cancel := context.WithTimeout(ctx, quitGrace)
	defer cancel()
	if l.mon != nil {
		if err := l.mon.Quit(qctx); err != nil {
			klog.ErrorS(err, "QMP quit")
		}
	}
	select {
	case <-l.exited:
	case <-qctx.Done():
		l.kill()
	}
	return l.Wait(ctx)
}

// Kill ends QEMU with SIGKILL and waits for the cleanup.
func (l *Launcher) Kill(ctx context.Context) (Domain, error) {
	l.kill()
	return l.Wait(ctx)
}

func (l *Launcher) kill() {
	if l.cmd == nil || l.cmd.Process == nil {
		return
	}
	select {
	case <-l.exited:
		return
	default:
	}
	l.state.handle(event{kind: evHostRequested})
	_ = syscall.Kill(-l.cmd.Process.Pid, syscall.SIGKILL)
	<-l.exited
}

// tailBuffer keeps the last lines a program (QEMU, a virtiofsd) wrote to
// stdout/stderr, and logs each.
type tailBuffer struct {
	mu     sync.Mutex
	max    int
	source string // the program, in the log
	lines  []string
	part   string
}

func newTailBuffer(max int, source string) *tailBuffer {
	return &tailBuffer{max: max, source: source}
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.part + string(p)
	parts := strings.Split(s, "\n")
	t.part = parts[len(parts)-1]
	for _, line := range parts[:len(parts)-1] {
		if line = strings.TrimSpace(line); line != "" {
			klog.InfoS(t.source, "output", line)
			t.lines = append(t.lines, line)
		}
	}
	if len(t.lines) > t.max {
		t.lines = t.lines[len(t.lines)-t.max:]
	}
	return len(p), nil
}

// String returns the last few lines, joined.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := t.lines
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	if t.part != "" {
		lines = append(lines, t.part)
	}
	return strings.Join(lines, " | ")
}
