//go:build qemu

package netsetup

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/launcher/cmdline"
	"github.com/kemu-dev/kemu/qmp"
	"github.com/kemu-dev/kemu/test/testguest"
)

const (
	qemuBinary  = "qemu-system-x86_64"
	bootTimeout = 90 * time.Second // one TCG boot on 2 busy cores, generous
)

var testguestMemory = resource.MustParse("192Mi")

// kernelBoot makes the VMI boot the test guest's kernel directly.
func kernelBoot(vmi *v1.VirtualMachineInstance) {
	vmi.Spec.Domain.Firmware.KernelBoot = &v1.KernelBoot{
		KernelArgs: "console=ttyS0 quiet kemu.tick=0",
		Container:  &v1.KernelBootContainer{Image: "oci:_out/testguest/oci/kernelboot", KernelPath: "/boot/vmlinuz", InitrdPath: "/boot/initrd.img"},
	}
	q := testguestMemory
	vmi.Spec.Domain.Memory.Guest = &q
}

// guestVM is the test guest running on the taps of a Result.
type guestVM struct {
	w     *testguest.Watcher
	agent string // guest agent socket
	out   *testguest.SyncBuffer
}

// boot starts QEMU for vmi with the result's taps as its NICs and waits
// for the guest's ready marker.
func boot(t *testing.T, vmi *v1.VirtualMachineInstance, r *Result) *guestVM {
	t.Helper()
	if _, err := exec.LookPath(qemuBinary); err != nil {
		t.Fatalf("%v (hack/install-deps.sh installs qemu-system-x86)", err)
	}
	art, err := testguest.Paths()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "kn")
	must(t, err, "temp dir")
	t.Cleanup(func() { os.RemoveAll(dir) })
	in := cmdline.Input{
		VMI:    vmi,
		Facts:  cmdline.Facts{Binary: qemuBinary, Accel: cmdline.AccelTCG},
		Paths:  cmdline.Paths{QMP: filepath.Join(dir, "qmp.sock"), Serial: filepath.Join(dir, "serial.sock"), GuestAgent: filepath.Join(dir, "qga.sock"), VNC: filepath.Join(dir, "vnc.sock")},
		Drives: map[string]cmdline.Drive{},
		Kernel: &cmdline.KernelBoot{Kernel: art.Kernel, Initrd: art.Initrd},
	}
	var extra []*os.File
	for _, ir := range r.Interfaces {
		nic := cmdline.NIC{Name: ir.Name, MAC: ir.MAC}
		for _, f := range ir.TapFDs {
			extra = append(extra, f)
			nic.TapFDs = append(nic.TapFDs, 2+len(extra))
		}
		in.NICs = append(in.NICs, nic)
	}
	argv, err := cmdline.Build(in)
	must(t, err, "cmdline.Build")
	out := &testguest.SyncBuffer{}
	cmd := exec.Command(qemuBinary, argv...)
	cmd.ExtraFiles, cmd.Stdout, cmd.Stderr = extra, out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	must(t, cmd.Start(), "starting QEMU")
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	vm := &guestVM{agent: in.Paths.GuestAgent, out: out}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		if t.Failed() {
			t.Logf("QEMU output:\n%s", out.String())
			if vm.w != nil {
				t.Logf("console:\n%s", vm.w.Tail(60))
			}
		}
	})
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	go func() {
		select {
		case <-exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	mon, err := qmp.Dial(ctx, in.Paths.QMP)
	must(t, err, "QMP")
	defer mon.Close()
	conn, err := net.Dial("unix", in.Paths.Serial)
	must(t, err, "serial console")
	t.Cleanup(func() { conn.Close() })
	vm.w = testguest.NewWatcher(conn)
	must(t, mon.Cont(ctx), "cont")
	ready, err := vm.w.WaitKind(ctx, testguest.KindReady)
	must(t, err, "waiting for the guest")
	t.Logf("guest ready %.1fs after exec (uptime %s)", time.Since(start).Seconds(), ready.Field("uptime"))
	return vm
}

// lease waits for the guest's DHCP result on eth0.
func (vm *guestVM) lease(t *testing.T) testguest.Marker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m, err := vm.w.WaitKind(ctx, "net", "iface", "eth0")
	must(t, err, "waiting for the guest's DHCP")
	return m
}

// run runs a command in the guest through the agent; it returns the exit
// code and output.
func (vm *guestVM) run(t *testing.T, path string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var agent *qmp.Agent
	must(t, poll(ctx, 200*time.Millisecond, func() (err error) {
		agent, err = qmp.DialAgent(ctx, vm.agent)
		return err
	}), "guest agent")
	defer agent.Close()
	st, err := agent.Run(ctx, path, args, nil)
	must(t, err, "guest-exec %s", path)
	return st.ExitCode, string(st.Stdout) + string(st.Stderr)
}

func (vm *guestVM) ping(t *testing.T, ip string) {
	t.Helper()
	if rc, out := vm.run(t, "/bin/ping", "-c1", "-W5", ip); rc != 0 {
		t.Errorf("guest: ping %s: exit %d: %s", ip, rc, out)
	}
}

// httpd serves /tmp/www in the guest on each port; index.html holds body.
func (vm *guestVM) httpd(t *testing.T, body string, ports ...int) {
	t.Helper()
	script := fmt.Sprintf("mkdir -p /tmp/www && echo %s > /tmp/www/index.html", body)
	for _, p := range ports {
		script += fmt.Sprintf(" && httpd -p %d -h /tmp/www", p)
	}
	if rc, out := vm.run(t, "/bin/sh", "-c", script); rc != 0 {
		t.Fatalf("guest: %s: exit %d: %s", script, rc, out)
	}
}

// reach fetches index.html from addr out of the node namespace, polling
// while the guest's server starts.
func (e *podEnv) reach(t *testing.T, addr, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got string
	if err := poll(ctx, 200*time.Millisecond, func() (err error) {
		got, err = httpGet(ctx, e.Node, addr, "/index.html")
		return err
	}); err != nil || got != want {
		t.Errorf("node → %s: %q, %v; want %q", addr, got, err, want)
	}
}

func checkMarker(t *testing.T, m testguest.Marker, kv ...string) {
	t.Helper()
	for i := 0; i < len(kv); i += 2 {
		if got := m.Field(kv[i]); got != kv[i+1] {
			t.Errorf("%s: %s=%q, want %q", m.Kind, kv[i], got, kv[i+1])
		}
	}
}

// The guest gets 10.0.2.2 by DHCP, pings its gateway and beyond the pod,
// and is reached at the pod IP on the listed port only.
func TestVMMasquerade(t *testing.T) {
	t.Parallel()
	e := newPodEnv(t)
	var vmi *v1.VirtualMachineInstance
	p := e.plan(t, func(v *v1.VirtualMachineInstance) {
		kernelBoot(v)
		v.Spec.Domain.Devices.Interfaces[0].Ports = []v1.Port{{Port: 8080}}
		vmi = v
	}, Options{})
	r := e.setup(t, p)
	vm := boot(t, vmi, r)
	mac := p.Interfaces[0].MAC.String()
	checkMarker(t, vm.lease(t), "status", "bound", "mac", mac, "ip", "10.0.2.2/24", "gw", "10.0.2.1", "dns", "10.96.0.10")
	nic, _ := vm.w.WaitKind(context.Background(), "nic", "iface", "eth0")
	checkMarker(t, nic, "mac", mac, "driver", "virtio_net")
	vm.ping(t, "10.0.2.1")
	vm.ping(t, nodeIP)
	vm.ping(t, outsideIP)
	vm.httpd(t, "kemu-masquerade", 8080, 8081)
	e.reach(t, podIP+":8080", "kemu-masquerade")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if got, err := httpGet(ctx, e.Node, podIP+":8081", "/index.html"); err == nil {
		t.Errorf("node → pod IP:8081 (not in ports) reached %q", got)
	}
}

// The guest takes the pod's IP and MAC by DHCP and is reached at the pod IP.
func TestVMBridge(t *testing.T) {
	t.Parallel()
	e := newPodEnv(t)
	var vmi *v1.VirtualMachineInstance
	p := e.plan(t, func(v *v1.VirtualMachineInstance) {
		kernelBoot(v)
		v.Spec.Domain.Devices.Interfaces[0].Masquerade = nil
		v.Spec.Domain.Devices.Interfaces[0].Bridge = &v1.InterfaceBridge{}
		vmi = v
	}, Options{})
	r := e.setup(t, p)
	vm := boot(t, vmi, r)
	checkMarker(t, vm.lease(t), "status", "bound", "mac", e.PodMAC.String(), "ip", podCIDR, "gw", nodeIP, "dns", "10.96.0.10")
	vm.ping(t, nodeIP)
	vm.ping(t, outsideIP)
	vm.httpd(t, "kemu-bridge", 8080)
	e.reach(t, podIP+":8080", "kemu-bridge")
}

// networkInterfaceMultiqueue with 2 vCPUs: a 2-queue tap, and the guest's
// virtio-net has 2 queue pairs; every port is forwarded.
func TestVMMultiqueue(t *testing.T) {
	t.Parallel()
	e := newPodEnv(t)
	var vmi *v1.VirtualMachineInstance
	p := e.plan(t, func(v *v1.VirtualMachineInstance) {
		kernelBoot(v)
		v.Spec.Domain.CPU.Cores = 2
		vmi = v
	}, Options{Multiqueue: ptr(true)})
	r := e.setup(t, p)
	if n := len(r.Interfaces[0].TapFDs); n != 2 {
		t.Fatalf("%d tap queues, want 2", n)
	}
	vm := boot(t, vmi, r)
	checkMarker(t, vm.lease(t), "status", "bound", "ip", "10.0.2.2/24")
	if rc, out := vm.run(t, "/bin/ls", "/sys/class/net/eth0/queues"); rc != 0 || strings.Join(strings.Fields(out), " ") != "rx-0 rx-1 tx-0 tx-1" {
		t.Errorf("guest eth0 queues: %q (exit %d), want rx-0 rx-1 tx-0 tx-1", out, rc)
	}
	vm.httpd(t, "kemu-mq", 8081)
	e.reach(t, podIP+":8081", "kemu-mq")
}
