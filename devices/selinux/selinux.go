// Package selinux confines each VM's QEMU sVirt style: every VM on a node
// gets its own MCS category pair, QEMU runs with a process label carrying
// that pair (svirt_t by default) and the VM's files (overlays, ISOs,
// sockets) get the matching file label (svirt_image_t by default), so two
// VMs on one node cannot read each other's disks.
//
// On a host where SELinux is disabled every operation is a no-op that says
// so once in the log. Label choice (the Labeler) works either way: it is
// pure bookkeeping, so a launcher can always allocate and record labels.
package selinux

import (
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"sync"

	goselinux "github.com/opencontainers/selinux/go-selinux"
	"k8s.io/klog/v2"
)

// Host hooks. They are variables so tests can stand in for an SELinux
// kernel; production code never changes them.
var (
	hostEnabled  = goselinux.GetEnabled
	setExecLabel = goselinux.SetExecLabel
	setFileLabel = goselinux.SetFileLabel

	disabledOnce = new(sync.Once)
)

// DisabledMessage is what is logged (once per process) when an operation is
// skipped because SELinux is disabled.
const DisabledMessage = "SELinux is disabled on this host: VM processes and files are not labelled"

// Enabled reports whether SELinux is enabled on this host (go-selinux's
// GetEnabled: selinuxfs mounted and the process has a label).
func Enabled() bool {
	return hostEnabled()
}

// skip reports whether an operation must be a no-op because SELinux is
// disabled, logging that once.
func skip() bool {
	if hostEnabled() {
		return false
	}
	disabledOnce.Do(func() { klog.InfoS(DisabledMessage) })
	return true
}

// SetExecForThisThread makes the next program executed by the calling OS
// thread run with l's process label (go-selinux SetExecLabel writes
// /proc/thread-self/attr/exec). The caller must hold runtime.LockOSThread
// from before this call until reset has returned, and must fork (cmd.Start)
// on that thread in between; reset clears the exec label again. If reset
// fails the thread still carries the label: do not unlock it, so the Go
// runtime discards the thread when the goroutine exits.
//
// When SELinux is disabled it does nothing and returns a no-op reset.
func (l Label) SetExecForThisThread() (reset func() error, err error) {
	noop := func() error { return nil }
	if skip() {
		return noop, nil
	}
	if l.Process == "" {
		return noop, errors.New("selinux: empty process label")
	}
	if err := setExecLabel(l.Process); err != nil {
		return noop, fmt.Errorf("selinux: set exec label %q: %w", l.Process, err)
	}
	return func() error {
		if err := setExecLabel(""); err != nil {
			return fmt.Errorf("selinux: clear exec label: %w", err)
		}
		return nil
	}, nil
}

// Start starts cmd with l's process label: it locks the calling goroutine
// to its thread, sets the exec label, starts cmd and clears the label again.
// The thread is unlocked only when the label was cleared; otherwise it stays
// locked and the runtime discards it when the calling goroutine exits (note
// that Pdeathsig follows the forking thread).
//
// When SELinux is disabled it is cmd.Start().
func (l Label) Start(cmd *exec.Cmd) error {
	if skip() {
		return cmd.Start()
	}
	runtime.LockOSThread()
	reset, err := l.SetExecForThisThread()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	startErr := cmd.Start()
	if err := reset(); err != nil {
		return errors.Join(startErr, err)
	}
	runtime.UnlockOSThread()
	return startErr
}

// LabelFiles sets l's file label on each path (following symlinks), e.g.
// the VM's overlays, ISOs and sockets. Every path is tried; the errors are
// joined. When SELinux is disabled it does nothing.
func (l Label) LabelFiles(paths ...string) error {
	if skip() {
		return nil
	}
	if l.File == "" {
		return errors.New("selinux: empty file label")
	}
	var errs []error
	for _, p := range paths {
		if p == "" {
			errs = append(errs, errors.New("selinux: empty path"))
			continue
		}
		if err := setFileLabel(p, l.File); err != nil {
			errs = append(errs, fmt.Errorf("selinux: label %s as %q: %w", p, l.File, err))
		}
	}
	return errors.Join(errs...)
}
