//go:build qemu

package cmdline

import (
	"context"
	"testing"
	"time"
)

// DetectCPU against the real QEMU under TCG: what the golden facts
// (testdata/cpu-probe-tcg-qemu7.2.jsonl) and the launcher's refusals
// assume holds for this QEMU too (7.2 on the host, 10 in the distro run).
func TestDetectCPU(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	t0 := time.Now()
	f, err := DetectCPU(ctx, qemuBinary, AccelTCG)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d models, %d features in %s", len(f.Models), len(f.Features), time.Since(t0))
	for name, want := range map[string]bool{"avx2": true, "sse2": true, "bmi1": true, "popcnt": true, "vmx": false, "avx512f": false} {
		if got, ok := f.Features[name]; !ok || got != want {
			t.Errorf("TCG provides %s: %v (known %v), want %v", name, got, ok, want)
		}
	}
	if m, ok := f.Models["qemu64"]; !ok || len(m.Unavailable) > 0 {
		t.Errorf("qemu64 not usable under TCG: %+v %v", m, ok)
	}
	if m := f.Models["Skylake-Client"]; len(m.Unavailable) == 0 {
		t.Errorf("Skylake-Client usable under TCG: the launch refusal test needs a model TCG cannot run")
	}
	if _, err := DetectCPU(ctx, qemuBinary, "hvf"); err == nil {
		t.Error("accel hvf accepted")
	}
}
