//go:build cluster && qemu

package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// burnUserData keeps the guest's vCPU busy.
const burnUserData = `#!/bin/sh
echo "KEMU-E2E burning" >/dev/console
while :; do :; done
`

// TestKemuctlTop is issue 20's kemuctl top vmi on the real cluster: as a
// namespace user bound to kemu.dev:view only, kemuctl top vmi -n NS shows
// the VMI whose guest burns CPU with a vCPU share above zero and its guest
// memory (used/total, from the balloon driver); with -A the namespace
// comes first. The figures come from kemu-api's stats subresource, the
// node agent of the VMI's node and its launcher.
func TestKemuctlTop(t *testing.T) {
	ev := need(t)
	dumpOnFailure(t, ev)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	viewer := ev.user(t, "top-viewer", "kemu.dev:view")
	if out, _ := viewer.kubectl(ev, "", "auth", "can-i", "get", "virtualmachineinstances.subresources.kemu.dev", "--subresource=stats"); strings.TrimSpace(out) != "yes" {
		t.Fatalf("kemu.dev:view can-i get virtualmachineinstances/stats: %q, want yes", strings.TrimSpace(out))
	}

	const name = "topvm"
	ev.apply(t, vmiManifest(vmiOptions{name: name, userData: burnUserData, labels: map[string]string{"kemu-e2e": name}}))
	t.Cleanup(func() { ev.deleteVMI(context.Background(), t, name) })
	ev.waitRunning(ctx, t, name, bootTimeout)

	// The guest starts burning once cloud-init ran its user data, and its
	// balloon driver reports a few seconds after boot: poll until both show.
	var row []string
	err := poll(ctx, 2*time.Second, func() error {
		cctx, ccancel := context.WithTimeout(ctx, time.Minute)
		defer ccancel()
		out, err := viewer.kemuctl(cctx, ev, "top", "vmi", "--no-headers", "--window=3s")
		if err != nil {
			return fmt.Errorf("kemuctl top vmi: %v\n%s", err, out)
		}
		row = topRow(out, 0, name)
		if len(row) != 7 {
			return fmt.Errorf("no row of 7 columns for %s in\n%s", name, out)
		}
		if cpu, err := strconv.Atoi(strings.TrimSuffix(row[1], "%")); err != nil || cpu <= 0 {
			return fmt.Errorf("CPU(%%) %q, want above 0%%:\n%s", row[1], out)
		}
		if used, total, ok := strings.Cut(row[2], "/"); !ok || used == "" || !strings.HasSuffix(total, "iB") {
			return fmt.Errorf("MEMORY %q, want used/total:\n%s", row[2], out)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kemuctl top vmi: %v", row)

	// -A lists every namespace's VMIs: the viewer, bound in ns only, may
	// not, and kemuctl says so; the administrator sees NAMESPACE first.
	if out, err := viewer.kemuctl(ctx, ev, "top", "vmi", "-A"); err == nil || !strings.Contains(out, "forbidden") {
		t.Errorf("kemuctl top vmi -A as the viewer: %v, want forbidden:\n%s", err, out)
	}
	out := ev.run(ctx, t, "top", "vmi", "-A", "--sort-by=cpu")
	if r := topRow(out, 1, name); !strings.HasPrefix(out, "NAMESPACE ") || len(r) != 8 || r[0] != ns {
		t.Errorf("kemuctl top vmi -A:\n%s", out)
	}
}

// topRow is the fields of the line of out whose column col is name.
func topRow(out string, col int, name string) []string {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > col && f[col] == name {
			return f
		}
	}
	return nil
}
