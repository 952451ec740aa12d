//go:build qemu

package main

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kemu-dev/kemu/api/launcherpod"
	"github.com/kemu-dev/kemu/launcher/rpc"
)

// The probe subcommand, run as the kubelet runs a VMI's exec and
// guestAgentPing probes (the argv controller/template renders), against a
// real launcher with the test guest: guest-ping passes once the agent
// answers, and is suppressed while the user pauses the guest; an exec probe
// passes or fails with the command's exit status in the guest, fails on its
// timeout, and fails without a launcher.
func TestProbeSubcommand(t *testing.T) {
	root, bin, dir, vmi := launcherWithVMI(t, `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: probe}
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
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	sockets := filepath.Join(dir, "s")
	p := startLauncher(t, ctx, bin, sockets, "--vmi-file", vmi, "--runtime-dir", filepath.Join(dir, "run"),
		"--image-cache", filepath.Join(dir, "cache"), "--base-dir", root, "--accel", "tcg", "--pod-network=false", "-v", "2")
	probe := func(lp launcherpod.Probe) (int, string) {
		t.Helper()
		if lp.SocketsDir == "" {
			lp.SocketsDir = sockets
		}
		if lp.Timeout == 0 {
			lp.Timeout = 5 * time.Second
		}
		cmd := exec.CommandContext(ctx, bin, lp.Args()...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		switch {
		case err == nil:
			return 0, string(out)
		case errors.As(err, &ee):
			return ee.ExitCode(), string(out)
		}
		t.Fatalf("%v: %v", lp.Args(), err)
		return 0, ""
	}
	start := time.Now()
	for {
		code, out := probe(launcherpod.Probe{GuestAgentPing: true})
		if code == 0 {
			t.Logf("guestAgentPing passes after %s: %s", time.Since(start).Round(time.Second), strings.TrimSpace(out))
			break
		}
		if code != 1 || ctx.Err() != nil {
			t.Fatalf("guestAgentPing: exit %d: %s", code, out)
		}
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
	}
	for _, tc := range []struct {
		cmd  []string
		to   time.Duration
		code int
		out  string
	}{
		{[]string{"/bin/true"}, 0, 0, "exit status 0"},
		{[]string{"/bin/sh", "-c", "exit 3"}, 0, 1, "exit status 3"},
		{[]string{"/no/such/program"}, 0, 1, "guest exec"},
		{[]string{"/bin/sleep", "30"}, time.Second, 1, "no result within 1s"},
	} {
		began := time.Now()
		code, out := probe(launcherpod.Probe{Command: tc.cmd, Timeout: tc.to})
		if code != tc.code || !strings.Contains(out, tc.out) {
			t.Errorf("exec %q: exit %d (%q), want %d with %q", tc.cmd, code, out, tc.code, tc.out)
		}
		if tc.to != 0 && time.Since(began) > tc.to+3*time.Second {
			t.Errorf("exec %q with timeout %s took %s", tc.cmd, tc.to, time.Since(began))
		}
	}
	if code, out := probe(launcherpod.Probe{SocketsDir: filepath.Join(dir, "none"), Timeout: time.Second, GuestAgentPing: true}); code != 1 {
		t.Errorf("no launcher: exit %d: %s", code, out)
	}

	// Paused by the user: the agent cannot answer, guest-ping is suppressed.
	conn, err := grpc.NewClient("unix://"+p.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rpc.NewLauncherClient(conn)
	if _, err := c.Pause(ctx, &rpc.Empty{}); err != nil {
		t.Fatal(err)
	}
	if code, out := probe(launcherpod.Probe{GuestAgentPing: true, Timeout: 2 * time.Second}); code != 0 || !strings.Contains(out, "suppressed") {
		t.Errorf("guestAgentPing while paused: exit %d: %s", code, out)
	}
	if _, err := c.Unpause(ctx, &rpc.Empty{}); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.exitCode(t); code != 0 && code != 3 {
		t.Errorf("launcher exit status %d after SIGTERM", code)
	}
	t.Logf("took %s", time.Since(start).Round(time.Second))
}
