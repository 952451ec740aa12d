//go:build qemu

package launcher

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"

	"github.com/kemu-dev/kemu/netsetup"
	"github.com/kemu-dev/kemu/netsetup/netsetuptest"
	"github.com/kemu-dev/kemu/test/testguest"
)

// TestPodNetworkMasquerade runs a VM whose launcher wires the pod network
// itself (Config.PodNetwork): the guest leases 10.0.2.2 from the built-in
// DHCP server, its web server is reached from the node at the pod IP, the
// domain reports the interface, and when the VM ends the pod namespace is
// as it was (no bridge, tap or nftables table).
func TestPodNetworkMasquerade(t *testing.T) {
	e := netsetuptest.NewPodEnv(t)
	vmi := parseVMI(t, `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: podnet, uid: 0b7c52a4-7a43-4c4e-9a43-7d7a4c1e9a01}
spec:
  domain:
    memory: {guest: 192Mi}
    firmware:
      kernelBoot:
        kernelArgs: console=ttyS0 quiet kemu.tick=0
        container: {image: "oci:_out/testguest/oci/kernelboot", kernelPath: /boot/vmlinuz, initrdPath: /boot/initrd.img}
    devices:
      interfaces: [{name: default, masquerade: {}, ports: [{port: 8080}]}]
  networks: [{name: default, pod: {}}]
`)
	cfg := newConfig(t, vmi)
	cfg.PodNetwork = &netsetup.Options{NetNSPath: e.Path, TapUID: -1, TapGID: -1}
	v := start(t, cfg)

	lease := v.wait(bootTimeout, testguest.IsKind(testguest.KindNet))
	if lease.Fields["status"] != "bound" || lease.Fields["ip"] != "10.0.2.2/24" || lease.Fields["gw"] != "10.0.2.1" {
		t.Fatalf("guest lease %v", lease.Fields)
	}
	d := v.l.Domain()
	if len(d.Interfaces) != 1 || d.Interfaces[0].MAC != lease.Fields["mac"] || !slices.Contains(d.Interfaces[0].IPs, netsetuptest.PodIP) ||
		d.Interfaces[0].GuestIP != "10.0.2.2/24" || d.Interfaces[0].InfoSource != "domain" {
		t.Errorf("domain interfaces %+v, lease %v", d.Interfaces, lease.Fields)
	}

	ctx := ctxFor(t, stepTimeout)
	agent, err := v.l.Agent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st, err := agent.Run(ctx, "/bin/sh", []string{"-c", "mkdir -p /tmp/www && echo kemu-launcher-podnet > /tmp/www/index.html && httpd -p 8080 -h /tmp/www"}, nil)
	if err != nil || st.ExitCode != 0 {
		t.Fatalf("httpd in the guest: %+v %v", st, err)
	}
	var body string
	for end := time.Now().Add(30 * time.Second); ; {
		body, err = netsetuptest.HTTPGet(ctx, e.Node, netsetuptest.PodIP+":8080", "/index.html")
		if err == nil || time.Now().After(end) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil || body != "kemu-launcher-podnet" {
		t.Fatalf("GET http://%s:8080/ from the node: %q %v", netsetuptest.PodIP, body, err)
	}

	if _, err := v.l.Shutdown(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	h := netsetuptest.Handle(t, e.Pod)
	links, err := h.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range links {
		names = append(names, l.Attrs().Name)
	}
	slices.Sort(names)
	if strings.Join(names, ",") != "eth0,lo" {
		t.Errorf("links left in the pod namespace: %v", names)
	}
	conn, err := nftables.New(nftables.WithNetNSFd(int(e.Pod)))
	if err != nil {
		t.Fatal(err)
	}
	tables, err := conn.ListTables()
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) != 0 {
		t.Errorf("%d nftables tables left in the pod namespace", len(tables))
	}
}

// Bad network input fails before QEMU starts, naming the field, with
// nothing created.
func TestPodNetworkBadInput(t *testing.T) {
	e := netsetuptest.NewPodEnv(t)
	vmi := parseVMI(t, `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: podnet-bad}
spec:
  domain:
    memory: {guest: 128Mi}
    devices:
      interfaces: [{name: default, masquerade: {}}]
      disks: [{name: root, disk: {bus: virtio}}]
  networks: [{name: default, pod: {vmNetworkCIDR: 10.244.0.0/16}}]
  volumes:
  - {name: root, containerDisk: {image: "oci:_out/testguest/oci/containerdisk"}}
`)
	cfg := newConfig(t, vmi)
	cfg.PodNetwork = &netsetup.Options{NetNSPath: e.Path, TapUID: -1, TapGID: -1}
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = l.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "spec.networks[0].pod.vmNetworkCIDR") {
		t.Fatalf("start with an overlapping vmNetworkCIDR: %v", err)
	}
	if d := l.Domain(); d.PID != 0 || d.State != StateShutoff {
		t.Errorf("domain after the failed start: %+v", d)
	}
	links, _ := netsetuptest.Handle(t, e.Pod).LinkList()
	if len(links) != 2 {
		t.Errorf("%d links in the pod namespace after a failed start, want lo and eth0", len(links))
	}
}
