//go:build cluster && qemu

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// multusNetwork is the e2e suite's NetworkAttachmentDefinition: a bridge
// of its own on each node, host-local addresses on a private /24.
const (
	multusNetwork = "e2e-blue"
	multusBridge  = "kemue2e0"
	multusSubnet  = "192.168.78."
)

// TestMultusSecondaryNetwork: two VMIs on the same node and a Multus
// network (a NetworkAttachmentDefinition of type bridge with host-local
// IPAM): VMI a has the pod network and the Multus network as a secondary
// interface (bridge binding), VMI b has the Multus network as its default
// network in place of the pod network (multus.default: true, the Pod's
// v1.multus-cni.io/default-network). status.interfaces lists each one's
// interfaces with their Multus addresses, guest a has its address on eth1
// and pings guest b on the Multus network. Deleted, their launcher Pods go
// (Multus deletes their networks).
func TestMultusSecondaryNetwork(t *testing.T) {
	ev := need(t)
	dumpOnFailure(t, ev)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const a, b = "multus-a", "multus-b"
	names := []string{a, b}
	t.Cleanup(func() {
		for _, n := range names {
			ev.c.Kubectl("-n", ns, "delete", "vmi", n, "--ignore-not-found", "--timeout=3m") //nolint:errcheck // best effort
		}
		ev.c.Kubectl("-n", ns, "delete", "network-attachment-definitions.k8s.cni.cncf.io", multusNetwork, "--ignore-not-found") //nolint:errcheck // best effort
	})
	if err := ev.c.InstallNetworkAttachmentCRD(); err != nil {
		t.Fatal(err)
	}
	if err := ev.c.CreateNetworkAttachment(ctx, ns, multusNetwork, map[string]any{
		"cniVersion": "0.4.0", "name": multusNetwork, "type": "bridge", "bridge": multusBridge,
		"ipam": map[string]any{"type": "host-local", "ranges": [][]map[string]string{{{"subnet": multusSubnet + "0/24"}}}},
	}); err != nil {
		t.Fatal(err)
	}
	node := ev.c.Nodes[0].Name
	t0 := time.Now()
	ev.apply(t, vmiManifest(vmiOptions{name: a, node: node, multus: multusNetwork, userData: consoleShellUserData, labels: map[string]string{"kemu-e2e": a}}))
	ev.apply(t, vmiManifest(vmiOptions{name: b, node: node, multus: multusNetwork, multusDefault: true, labels: map[string]string{"kemu-e2e": b}}))
	// want: the interfaces' names in order; the last one is on the Multus
	// network.
	want := map[string][]string{a: {"default", multusNetwork}, b: {"default"}}
	multusIP, pods := map[string]string{}, map[string]string{}
	for _, n := range names {
		vmi := ev.waitRunning(ctx, t, n, bootTimeout)
		if vmi.Status.NodeName != node {
			t.Errorf("VMI %s on %s, want %s (nodeSelector)", n, vmi.Status.NodeName, node)
		}
		pods[n] = vmi.Status.LauncherPod
		err := poll(ctx, 500*time.Millisecond, func() error {
			v, err := ev.getVMI(ctx, n)
			if err != nil || v == nil {
				return fmt.Errorf("VMI %s: %v", n, err)
			}
			ifs := v.Status.Interfaces
			ok := len(ifs) == len(want[n])
			for i := 0; ok && i < len(ifs); i++ {
				ok = ifs[i].Name == want[n][i] && ifs[i].MAC != ""
			}
			if !ok || !strings.HasPrefix(ifs[len(ifs)-1].IPAddress, multusSubnet) {
				return fmt.Errorf("status.interfaces %+v, want %v, the last with an address in %s0/24", ifs, want[n], multusSubnet)
			}
			multusIP[n] = ifs[len(ifs)-1].IPAddress
			t.Logf("VMI %s status.interfaces %+v", n, ifs)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("both VMIs Running with their Multus addresses %v, %s after apply", multusIP, time.Since(t0).Round(time.Millisecond))
	// b's Pod: Multus's network is its default one (eth0, the Pod IP).
	pod, err := ev.kube.CoreV1().Pods(ns).Get(ctx, pods[b], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := pod.Annotations["v1.multus-cni.io/default-network"]; got != multusNetwork {
		t.Errorf("Pod %s: v1.multus-cni.io/default-network %q, want %s", pod.Name, got, multusNetwork)
	}
	if pod.Status.PodIP != multusIP[b] {
		t.Errorf("Pod %s has IP %s, the guest %s: multus.default did not replace the pod network", pod.Name, pod.Status.PodIP, multusIP[b])
	}

	// Inside guest a: its Multus address on eth1, and guest b answers a
	// ping on the Multus network.
	con := ev.startConsole(t, a)
	defer con.stop()
	if err := con.runInShell(ctx, "ip -4 -o addr show dev eth1", "inet "+multusIP[a]+"/", 3*time.Minute); err != nil {
		t.Fatalf("guest %s's eth1 has not %s: %v", a, multusIP[a], err)
	}
	tPing := time.Now()
	cmd := fmt.Sprintf("ping -c 2 -W 2 %s >/dev/null && echo multus-ping-$((40+2))-ok", multusIP[b])
	if err := con.runInShell(ctx, cmd, "multus-ping-42-ok", 2*time.Minute); err != nil {
		t.Fatalf("guest %s cannot ping %s (guest %s) on %s: %v", a, multusIP[b], b, multusNetwork, err)
	}
	t.Logf("guest %s pings guest %s at %s on the Multus network (%s)", a, b, multusIP[b], time.Since(tPing).Round(time.Millisecond))
	con.stop()

	// Deleted: the launcher Pods go, their networks deleted through Multus.
	tDel := time.Now()
	for _, n := range names {
		ev.kubectl(t, "-n", ns, "delete", "vmi", n, "--wait=false")
	}
	err = poll(ctx, time.Second, func() error {
		for _, n := range names {
			if _, err := ev.kube.CoreV1().Pods(ns).Get(ctx, pods[n], metav1.GetOptions{}); err == nil {
				return fmt.Errorf("launcher Pod %s still exists", pods[n])
			} else if !apierrors.IsNotFound(err) {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%v (%s after delete)", err, time.Since(tDel).Round(time.Second))
	}
	t.Logf("both launcher Pods gone %s after delete", time.Since(tDel).Round(time.Millisecond))
}
