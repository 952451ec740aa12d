//go:build qemu

package launcher

import (
	"context"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kemu-dev/kemu/netsetup"
	"github.com/kemu-dev/kemu/netsetup/netsetuptest"
	"github.com/kemu-dev/kemu/qmp"
	"github.com/kemu-dev/kemu/test/testguest"
)

// TestPasst boots a guest on the passt binding in a pod network namespace,
// its link down from the start (interfaces[].state: down): the guest sees
// no carrier; set up, the guest leases the pod's own IP from passt's DHCP,
// its web server answers at the pod IP from the node (port 8080 forwarded,
// 8081 not), and set down again the guest loses its carrier. The domain
// reports the link each time; when the VM ends passt is gone and the pod
// namespace has only what it had (passt creates nothing in it).
func TestPasst(t *testing.T) {
	if _, err := exec.LookPath(DefaultPasst); err != nil {
		t.Fatalf("passt (hack/install-deps.sh): %v", err)
	}
	e := netsetuptest.NewPodEnv(t)
	vmi := parseVMI(t, `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: passt, uid: 5d0f5a44-3c1e-4d0e-8d1f-0c4c0a3b2f11}
spec:
  domain:
    memory: {guest: 192Mi}
    firmware:
      kernelBoot:
        kernelArgs: console=ttyS0 quiet kemu.tick=0 kemu.dhcp=0
        container: {image: "oci:_out/testguest/oci/kernelboot", kernelPath: /boot/vmlinuz, initrdPath: /boot/initrd.img}
    devices:
      interfaces: [{name: default, passtBinding: {}, state: down, ports: [{port: 8080}]}]
  networks: [{name: default, pod: {}}]
`)
	cfg := newConfig(t, vmi)
	cfg.PodNetwork = &netsetup.Options{NetNSPath: e.Path, TapUID: -1, TapGID: -1}
	v := start(t, cfg)
	v.wait(bootTimeout, testguest.IsKind(testguest.KindReady))

	ctx := ctxFor(t, 3*stepTimeout)
	agent, err := v.l.Agent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sh := func(script string) string {
		t.Helper()
		st, err := agent.Run(ctx, "/bin/sh", []string{"-c", script}, nil)
		if err != nil || st.ExitCode != 0 {
			t.Fatalf("guest: %s: %+v %v", script, st, err)
		}
		return strings.TrimSpace(string(st.Stdout))
	}
	carrier := func(want string) {
		t.Helper()
		var got string
		for end := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			if got = sh("cat /sys/class/net/eth0/carrier 2>/dev/null || echo 0"); got == want || time.Now().After(end) {
				break
			}
		}
		if got != want {
			t.Fatalf("guest eth0 carrier %s, want %s", got, want)
		}
	}
	linkDown := func(want bool) {
		t.Helper()
		if d := v.l.Domain(); len(d.Interfaces) != 1 || d.Interfaces[0].LinkDown != want {
			t.Fatalf("domain interfaces %+v, want link down %v", d.Interfaces, want)
		}
	}

	sh("ip link set eth0 up")
	carrier("0")
	linkDown(true)
	if err := v.l.SetLinkState(ctx, "default", true); err != nil {
		t.Fatal(err)
	}
	carrier("1")
	linkDown(false)

	lease := sh("udhcpc -i eth0 -n -q -t 10 -T 1 -A 1 -s /etc/kemu/udhcpc.script >/dev/null 2>&1; ip -4 -o addr show dev eth0")
	if !strings.Contains(lease, " "+netsetuptest.PodIP+"/") {
		t.Fatalf("guest eth0 after DHCP from passt: %q, want the pod IP %s", lease, netsetuptest.PodIP)
	}
	d := v.l.Domain()
	if !slices.Contains(d.Interfaces[0].IPs, netsetuptest.PodIP) || !strings.HasPrefix(d.Interfaces[0].GuestIP, netsetuptest.PodIP+"/") {
		t.Errorf("domain interfaces %+v", d.Interfaces)
	}

	sh("mkdir -p /tmp/www && echo kemu-passt > /tmp/www/index.html && httpd -p 8080 -h /tmp/www && httpd -p 8081 -h /tmp/www")
	var body string
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		body, err = netsetuptest.HTTPGet(ctx, e.Node, netsetuptest.PodIP+":8080", "/index.html")
		if err == nil || time.Now().After(end) {
			break
		}
	}
	if err != nil || body != "kemu-passt" {
		t.Fatalf("GET http://%s:8080/ from the node: %q %v", netsetuptest.PodIP, body, err)
	}
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	if body, err := netsetuptest.HTTPGet(short, e.Node, netsetuptest.PodIP+":8081", "/index.html"); err == nil {
		t.Errorf("port 8081 is not in ports, but the node got %q from it", body)
	}
	cancel()

	if err := v.l.SetLinkState(ctx, "default", false); err != nil {
		t.Fatal(err)
	}
	carrier("0")
	linkDown(true)
	var qe *qmp.Error
	if err := v.l.SetLinkState(ctx, "nope", true); err == nil || errors.As(err, &qe) {
		t.Errorf("set link of an unknown interface: %v, want the launcher's refusal", err)
	}

	var pids []int
	for _, p := range v.l.passt {
		pids = append(pids, p.cmd.Process.Pid)
	}
	if _, err := v.l.Shutdown(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if d := v.l.Domain(); strings.Contains(d.Message, "passt") {
		t.Errorf("a guest shutdown ended as %q: passt's own end (QEMU closed its socket) is no failure", d.Message)
	}
	for _, pid := range pids {
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("passt %d still runs after the VM ended", pid)
		}
	}
	links, err := netsetuptest.Handle(t, e.Pod).LinkList()
	if err != nil {
		t.Fatal(err)
	}
	if len(links) != 2 {
		t.Errorf("%d links in the pod namespace, want lo and eth0", len(links))
	}
}
