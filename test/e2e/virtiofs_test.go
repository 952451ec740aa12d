//go:build cluster && qemu

package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kemu-dev/kemu/test/testguest"
)

// TestVirtiofsConfigMap: a ConfigMap shared with the guest through virtiofs
// on the real node (the launcher Pod's seccomp profile, capabilities and
// user namespaces as the kubelet and containerd set them), and an update of
// the ConfigMap with kubectl reaching the running guest, as KubeVirt
// promises for filesystems (the kubelet swaps the mount's ..data symlink).
func TestVirtiofsConfigMap(t *testing.T) {
	ev := need(t)
	dumpOnFailure(t, ev)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const name = "vfs"
	t.Cleanup(func() {
		ev.c.Kubectl("-n", ns, "delete", "vmi", name, "--ignore-not-found", "--timeout=3m")              //nolint:errcheck // best effort
		ev.c.Kubectl("-n", ns, "delete", "configmap", name+"-cfg", "--ignore-not-found", "--timeout=1m") //nolint:errcheck // best effort
	})
	ev.apply(t, fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata: {name: %[1]s-cfg, namespace: %[2]s}
data: {color: blue}
---
apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: %[1]s, namespace: %[2]s, labels: {kemu-e2e: %[1]s}}
spec:
  domain:
    memory: {guest: 128Mi}
    firmware:
      kernelBoot:
        kernelArgs: console=ttyS0 kemu.dhcp=0 kemu.virtiofs=cfg kemu.fsrescan=2
        container: {image: %[3]s, imagePullPolicy: IfNotPresent, kernelPath: /boot/vmlinuz, initrdPath: /boot/initrd.img}
    devices:
      autoattachPodInterface: false
      filesystems:
      - {name: cfg, virtiofs: {}}
  volumes:
  - {name: cfg, configMap: {name: %[1]s-cfg}}
`, name, ns, kernelBootImage))
	ev.waitRunning(ctx, t, name, bootTimeout)
	con := ev.startConsole(t, name)
	color := func() string {
		v := ""
		for _, line := range strings.Split(con.out.String(), "\n") {
			if m, ok := testguest.ParseMarker(line); ok && m.Kind == testguest.KindFSFile && m.Field("tag") == "cfg" && m.Field("path") == "color" {
				b, _ := base64.StdEncoding.DecodeString(m.Field("b64"))
				v = string(b)
			}
		}
		return v
	}
	if err := poll(ctx, 500*time.Millisecond, func() error {
		if c := color(); c != "blue" {
			return fmt.Errorf("the guest reads color %q through virtiofs, want blue; console:\n%s", c, tail(con.out.String(), 1500))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	ev.kubectl(t, "-n", ns, "patch", "configmap", name+"-cfg", "--type=merge", "-p", `{"data":{"color":"green"}}`)
	// The kubelet refreshes a ConfigMap volume on its sync period (up to a
	// minute and its cache's TTL).
	uctx, ucancel := context.WithTimeout(ctx, 3*time.Minute)
	defer ucancel()
	if err := poll(uctx, time.Second, func() error {
		if c := color(); c != "green" {
			return fmt.Errorf("the guest still reads color %q", c)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("the guest read the updated ConfigMap %s after kubectl patch", time.Since(t0).Round(time.Second))
	con.stop()
	ev.deleteVMI(ctx, t, name)
}
