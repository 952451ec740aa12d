//go:build qemu

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kemu-dev/kemu/devices/cgroup"
	"github.com/kemu-dev/kemu/launcher/dropcaps"
	"github.com/kemu-dev/kemu/launcher/rpc"
	"github.com/kemu-dev/kemu/launcher/signals"
	"github.com/kemu-dev/kemu/launcher/unpriv"
	"github.com/kemu-dev/kemu/netsetup/netsetuptest"
)

// --vmi-file starts the VM inside a pod network namespace, wiring the
// default pod interface (masquerade); the socket becomes ready; SIGTERM
// shuts the guest down (GuestShutdown, stopSignal SIGTERM), the launcher
// exits 3 (a signal alone, no Shutdown RPC: the host's stop, as the
// kubelet's liveness kill) and the namespace is as before.
func TestVMIFileAndSIGTERM(t *testing.T) {
	root, bin, dir, vmi := launcherWithVMI(t, `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: kl}
spec:
  terminationGracePeriodSeconds: 90
  domain:
    memory: {guest: 192Mi}
    devices:
      disks:
      - {name: root, disk: {bus: virtio}}
  volumes:
  - {name: root, containerDisk: {image: "oci:_out/testguest/oci/containerdisk"}}
`)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	sockets := filepath.Join(dir, "s")
	pod := netsetuptest.NewPodEnv(t)
	// nsenter changes only the network namespace (ip netns exec would also
	// remount /sys, hiding the cgroup2 hierarchy).
	cmd := exec.CommandContext(ctx, "nsenter", "--net="+pod.Path, bin, "--vmi-file", vmi, "--sockets-dir", sockets,
		"--runtime-dir", filepath.Join(dir, "run"), "--image-cache", filepath.Join(dir, "cache"),
		"--base-dir", root, "--accel", "tcg", "-v", "2")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	// The launcher in a cgroup of its own, as in a container: QEMU's device
	// cgroup goes below it and must be gone when the launcher exits,
	// although by then the launcher has dropped its capabilities.
	container := containerCgroup(t)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: container.fd}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("launcher log:\n%s", stderr.String())
		}
	}()
	sock := filepath.Join(sockets, "launcher.sock")
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rpc.NewLauncherClient(conn)
	// WaitForReady: the client retries until the socket exists.
	w, err := c.WatchDomain(ctx, &rpc.WatchRequest{FromSeq: 1}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := w.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if d := ev.GetDomain(); d != nil && d.State == rpc.DomainState_Shutoff {
			t.Fatalf("the VM did not start: %v", d)
		}
		if d := ev.GetDomain(); d != nil && d.State == rpc.DomainState_Running {
			if len(d.Interfaces) != 1 || d.Interfaces[0].GetName() != "default" || d.Interfaces[0].GetGuestIp() != "10.0.2.2/24" ||
				len(d.Interfaces[0].GetIpAddresses()) != 1 || d.Interfaces[0].GetIpAddresses()[0] != netsetuptest.PodIP {
				t.Errorf("domain interfaces %v", d.Interfaces)
			}
			break
		}
	}
	// QEMU runs unprivileged; the launcher kept only KILL and NET_ADMIN.
	dom, err := c.GetDomain(ctx, &rpc.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	qs, err := unpriv.ReadStatus(int(dom.GetDomain().GetQemuPid()))
	if err != nil {
		t.Fatal(err)
	}
	if err := qs.Unprivileged(unpriv.Identity{UID: unpriv.UID, GID: unpriv.GID}); err != nil || qs.CapBnd != 0 {
		t.Errorf("QEMU: %v (CapBnd %x)", err, qs.CapBnd)
	}
	var keep uint64
	for _, c := range dropcaps.Keep {
		keep |= 1 << uint(c)
	}
	deadline := time.Now().Add(time.Minute) // the drop follows the start
	for {
		ls, err := unpriv.ReadStatus(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		if ls.CapEff == keep && ls.CapPrm == keep && ls.CapBnd == keep && ls.CapInh == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("launcher capabilities eff %x prm %x bnd %x inh %x, want %x", ls.CapEff, ls.CapPrm, ls.CapBnd, ls.CapInh, keep)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// With only KILL and NET_ADMIN left, the launcher still reaches QEMU's
	// VNC socket (group-only, as QEMU's other sockets) through QEMU's group.
	vnc, err := c.Vnc(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var greeting []byte
	for len(greeting) < 12 {
		m, err := vnc.Recv()
		if err != nil {
			t.Fatalf("vnc: %v (so far %q)", err, greeting)
		}
		greeting = append(greeting, m.Data...)
	}
	if string(greeting) != "RFB 003.008\n" {
		t.Errorf("vnc greeting %q", greeting)
	}
	vnc.CloseSend()
	con, err := c.Console(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for !strings.Contains(out.String(), "KEMU-GUEST acpid status=started") {
		m, err := con.Recv()
		if err != nil {
			t.Fatalf("console: %v (so far %q)", err, out.String())
		}
		out.Write(m.Data)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var ee *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &ee) || ee.ExitCode() != signals.ExitStopped {
		t.Fatalf("launcher exit: %v, want exit status %d (stopped by a signal alone)", err, signals.ExitStopped)
	}
	if !strings.Contains(stderr.String(), `stopSignal="SIGTERM"`) {
		t.Errorf("no stopSignal=\"SIGTERM\" in the log")
	}
	if links, _ := netsetuptest.Handle(t, pod.Pod).LinkList(); len(links) != 2 {
		t.Errorf("%d links in the pod namespace after the VM ended, want lo and eth0", len(links))
	}
	if !strings.Contains(stderr.String(), "reason=\"GuestShutdown\"") {
		t.Errorf("no GuestShutdown in the log")
	}
	// Once the VM ran, the launcher gave back what only its setup used.
	if !strings.Contains(stderr.String(), "Released the setup's memory") {
		t.Errorf("the launcher did not release its setup's memory (launcher/memtrim)")
	}
	if sub, _ := filepath.Glob(filepath.Join(container.dir, "kemu-qemu-*")); len(sub) > 0 {
		t.Errorf("QEMU's device cgroup left behind: %v", sub)
	}
	for _, p := range []string{sock, filepath.Join(dir, "run")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left behind: %v", p, err)
		}
	}
}

// testCgroups numbers the container cgroups of this test process.
var testCgroups atomic.Int64

type testCgroup struct {
	dir string
	fd  int
}

// containerCgroup is a fresh cgroup beside the test's own, standing in for
// a container's: owned by root, mode 0755 (the host's root cgroup is 0555).
func containerCgroup(t testing.TB) testCgroup {
	t.Helper()
	h, err := cgroup.Self()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(h.Dir, fmt.Sprintf("kemu-test-launcher-%d-%d", os.Getpid(), testCgroups.Add(1)))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Open(dir, syscall.O_DIRECTORY|syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Close(fd)
		deadline := time.Now().Add(30 * time.Second)
		for os.Remove(dir) != nil && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond) // until the launcher's process has left it
		}
	})
	return testCgroup{dir: dir, fd: fd}
}
