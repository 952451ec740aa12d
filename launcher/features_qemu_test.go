//go:build qemu

package launcher

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

const featuresVMI = `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: features}
spec:
  domain:
    memory: {guest: 256Mi}
    cpu:
      model: qemu64
      features:
      - {name: avx2}
      - {name: popcnt, policy: disable}
      - {name: bmi1, policy: optional}
      - {name: avx512f, policy: optional}
      - {name: vmx, policy: forbid}
    features:
      acpi: {enabled: false}
      kvm: {hidden: true}
      pvspinlock: {enabled: false}
    devices:
      autoattachPodInterface: false
      disks:
      - {name: root, disk: {bus: virtio}}
  volumes:
  - {name: root, containerDisk: {image: "oci:_out/testguest/oci/containerdisk"}}
`

// The guest sees spec.domain.cpu and spec.domain.features under TCG: a
// named model (qemu64, without avx2 and bmi1) with avx2 required and bmi1
// optional (both present), popcnt disabled, avx512f optional and vmx
// forbidden (absent: TCG has neither), ACPI off (no QEMU ACPI tables).
// What TCG cannot provide fails the start by field, leaving nothing.
func TestFeaturesInGuest(t *testing.T) {
	for name, tc := range map[string]struct{ patch, want string }{
		"hyperv under TCG":           {"      hyperv: {relaxed: {}}\n", "spec.domain.features.hyperv.relaxed: needs KVM"},
		"required feature TCG lacks": {"", `spec.domain.cpu.features[5]: "avx512bw" (require): tcg cannot provide it`},
		"model TCG cannot run":       {"", `spec.domain.cpu.model: "Skylake-Client": not usable under tcg`},
	} {
		t.Run(name, func(t *testing.T) {
			y := strings.Replace(featuresVMI, "      pvspinlock: {enabled: false}\n", "      pvspinlock: {enabled: false}\n"+tc.patch, 1)
			switch name {
			case "required feature TCG lacks":
				y = strings.Replace(y, "      - {name: vmx, policy: forbid}\n", "      - {name: vmx, policy: forbid}\n      - {name: avx512bw}\n", 1)
			case "model TCG cannot run":
				y = strings.Replace(y, "model: qemu64", "model: Skylake-Client", 1)
			}
			cfg := newConfig(t, parseVMI(t, y))
			l, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = l.Start(ctxFor(t, stepTimeout))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if d := l.Domain(); d.State != StateShutoff || d.Reason != ReasonFailedToStart || d.PID != 0 {
				t.Errorf("state %s pid %d", d, d.PID)
			}
			if _, err := os.Stat(cfg.Dir); !os.IsNotExist(err) {
				t.Errorf("runtime dir left: %v", err)
			}
		})
	}

	t0 := time.Now()
	v := start(t, newConfig(t, parseVMI(t, featuresVMI)))
	if cpu := v.l.Argv(); !strings.Contains(strings.Join(cpu, " "), "-cpu qemu64,avx2=on,popcnt=off,bmi1=on,vmx=off,kvm=off,kvm-pv-unhalt=off") {
		t.Errorf("argv %v", cpu)
	}
	ctx := ctxFor(t, 6*time.Minute)
	pollPing(t, ctx, v.l, bootTimeout, "after boot")
	t.Logf("booted with the guest agent in %s", time.Since(t0))
	var out, errOut bytes.Buffer
	r, err := v.l.Exec(ctx, "grep -m1 '^flags' /proc/cpuinfo; echo acpi-tables: $(ls /sys/firmware/acpi/tables 2>/dev/null)", &out, &errOut)
	if err != nil || !r.OK() {
		t.Fatalf("exec: %v %+v %s", err, r, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "flags") {
		t.Fatalf("guest said %q", out.String())
	}
	flags := map[string]bool{}
	for _, f := range strings.Fields(strings.TrimPrefix(lines[0], "flags")) {
		flags[f] = true
	}
	for f, want := range map[string]bool{"avx2": true, "bmi1": true, "sse2": true, "popcnt": false, "avx512f": false, "vmx": false} {
		if flags[f] != want {
			t.Errorf("guest CPU flag %s: %v, want %v (flags: %s)", f, flags[f], want, lines[0])
		}
	}
	// acpi=off: no tables from QEMU (its WAET); on q35 SeaBIOS still
	// gives its fallback ones (launcher/cmdline's acpi-off case).
	if tables := strings.Fields(strings.TrimPrefix(lines[1], "acpi-tables:")); slices.Contains(tables, "WAET") || !strings.HasPrefix(lines[1], "acpi-tables:") {
		t.Errorf("ACPI off, but the guest has QEMU's ACPI tables: %s", lines[1])
	} else {
		t.Logf("guest ACPI tables (SeaBIOS's): %q", tables)
	}
}
