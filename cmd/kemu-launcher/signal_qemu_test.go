//go:build qemu

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// SIGTERM while the VM from --vmi-file is being started: the start is
// cancelled (or the VM it started killed), nothing is left behind (no
// QEMU, no runtime directory, no socket) and the exit status is 3, not 0.
func TestSIGTERMDuringStart(t *testing.T) {
	root, bin, dir, vmi := launcherWithVMI(t, `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: early}
spec:
  domain:
    memory: {guest: 192Mi}
    devices:
      autoattachPodInterface: false
      disks:
      - {name: root, disk: {bus: virtio}}
  volumes:
  - {name: root, containerDisk: {image: "oci:_out/testguest/oci/containerdisk"}}
`)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := filepath.Join(dir, "run")
	p := startLauncher(t, ctx, bin, filepath.Join(dir, "s"), "--vmi-file", vmi, "--runtime-dir", run,
		"--image-cache", filepath.Join(dir, "cache"), "--base-dir", root, "--accel", "tcg", "--pod-network=false", "-v", "2")
	// The socket is ready before the Sync from --vmi-file begins: the start
	// (image copy, QEMU, QMP) is under way or about to be.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.exitCode(t); code != 3 {
		t.Errorf("exit status %d after SIGTERM during the start, want 3", code)
	}
	log := p.stderr.String()
	if !strings.Contains(log, "Signal before the VM started; not starting it") {
		t.Errorf("no signal handling in the log")
	}
	switch {
	case strings.Contains(log, "The VM's start was stopped") && strings.Contains(log, "context canceled"):
		t.Log("the start under way was cancelled")
	case strings.Contains(log, "Killed the VM that started meanwhile"):
		t.Log("the start had finished: the VM was killed")
	default:
		t.Errorf("neither a cancelled start nor a killed VM in the log")
	}
	for _, f := range []string{run, p.socket} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("%s left behind: %v", f, err)
		}
	}
	// No QEMU of this VM survives the launcher.
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, c := range procs {
		if b, err := os.ReadFile(c); err == nil && strings.Contains(string(b), "qemu") && strings.Contains(string(b), run) {
			t.Errorf("a QEMU is left: %s", strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
}
