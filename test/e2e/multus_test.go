//go:build cluster && qemu

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// multusNetwork is the e2e suite's NetworkAttachmentDefinition: a bridge
// of its own on each node, host-local addresses on a private /24.
const (
	multusNetwork = "e2e-blue"
	multusBridge  = "kemue2e0"
	multusSubnet  = "192.168.78."
)

// TestMultusSecondaryNetwork: two VMIs on the same node with the pod
// network and a Multus network (bridge binding, a NetworkAttachmentDefinition
// of type bridge with host-local IPAM): status.interfaces lists both
// interfaces with the secondary address, the guests have it on eth1 and
// one guest pings the other on the secondary network.
func TestMultusSecondaryNetwork(t *testing.T) {
	ev := need(t)
	dumpOnFailure(t, ev)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	names := []string{"multus-a", "multus-b"}
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
	for _, n := range names {
		ev.apply(t, vmiManifest(vmiOptions{name: n, node: node, multus: multusNetwork, userData: consoleShellUserData, labels: map[string]string{"kemu-e2e": n}}))
	}
	secondary := map[string]string{}
	for _, n := range names {
		vmi := ev.waitRunning(ctx, t, n, bootTimeout)
		if vmi.Status.NodeName != node {
			t.Errorf("VMI %s on %s, want %s (nodeSelector)", n, vmi.Status.NodeName, node)
		}
		err := poll(ctx, 500*time.Millisecond, func() error {
			v, err := ev.getVMI(ctx, n)
			if err != nil || v == nil {
				return fmt.Errorf("VMI %s: %v", n, err)
			}
			ifs := v.Status.Interfaces
			if len(ifs) < 2 || ifs[0].Name != "default" || ifs[1].Name != multusNetwork || ifs[0].MAC == "" || ifs[1].MAC == "" ||
				!strings.HasPrefix(ifs[1].IPAddress, multusSubnet) {
				return fmt.Errorf("status.interfaces %+v, want default and %s with an address in %s0/24", ifs, multusNetwork, multusSubnet)
			}
			secondary[n] = ifs[1].IPAddress
			t.Logf("VMI %s status.interfaces %+v", n, ifs)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("both VMIs Running with their secondary addresses %v, %s after apply", secondary, time.Since(t0).Round(time.Millisecond))

	// Inside guest a: its secondary address on eth1, and guest b answers
	// a ping on the secondary network.
	con := ev.startConsole(t, names[0])
	defer con.stop()
	if err := con.runInShell(ctx, "ip -4 -o addr show dev eth1", "inet "+secondary[names[0]]+"/", 3*time.Minute); err != nil {
		t.Fatalf("guest %s's eth1 has not %s: %v", names[0], secondary[names[0]], err)
	}
	tPing := time.Now()
	cmd := fmt.Sprintf("ping -c 2 -W 2 %s >/dev/null && echo multus-ping-$((40+2))-ok", secondary[names[1]])
	if err := con.runInShell(ctx, cmd, "multus-ping-42-ok", 2*time.Minute); err != nil {
		t.Fatalf("guest %s cannot ping %s (guest %s) on %s: %v", names[0], secondary[names[1]], names[1], multusNetwork, err)
	}
	t.Logf("guest %s pings guest %s at %s on the Multus network (%s)", names[0], names[1], secondary[names[1]], time.Since(tPing).Round(time.Millisecond))
}
