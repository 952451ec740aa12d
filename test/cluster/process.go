package cluster

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// process is one child (etcd, kube-apiserver, ...) with its log file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed once the child has been reaped
	waitErr error         // valid after done is closed
}

// startProcess starts bin with args, stdout+stderr to logPath.
//
// The child is started from a goroutine locked to its OS thread which then
// waits for the child: Pdeathsig fires when the *thread* that forked the child
// exits, and the Go runtime may retire idle threads, so the thread is pinned
// for the child's lifetime.
func startProcess(name, bin string, args []string, dir, logPath string, env []string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	p := &process{name: name, logPath: logPath, done: make(chan struct{})}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.Stdin = nil
	cmd.Env = env
	cmd.SysProcAttr = sysProcAttr()
	p.cmd = cmd
	fmt.Fprintf(logf, "+ %s %s\n", bin, strings.Join(args, " "))

	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Never unlock: when this goroutine returns, its thread exits with it
		// (the child is gone by then, so no parent-death signal is lost).
		if err := cmd.Start(); err != nil {
			started <- err
			logf.Close()
			close(p.done)
			return
		}
		started <- nil
		p.waitErr = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group, waits up to grace, then SIGKILLs
// the group and waits for the child to be reaped.
func (p *process) stop(grace time.Duration) error {
	if p.exited() {
		// The leader is gone; its group may still hold children.
		_ = signalGroup(p.cmd.Process, syscall.SIGKILL)
		return nil
	}
	if grace > 0 {
		_ = signalGroup(p.cmd.Process, syscall.SIGTERM)
		select {
		case <-p.done:
			_ = signalGroup(p.cmd.Process, syscall.SIGKILL)
			return nil
		case <-time.After(grace):
		}
	}
	_ = signalGroup(p.cmd.Process, syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, p.pid())
	}
}

// tail returns the last n lines of the process log.
func (p *process) tail(n int) string {
	return tailFile(p.logPath, n)
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	const max = 64 << 10
	if len(b) > max {
		b = b[len(b)-max:]
	}
	b = bytes.TrimRight(b, "\n")
	lines := bytes.Split(b, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
