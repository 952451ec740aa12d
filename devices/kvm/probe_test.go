//go:build qemu

package kvm

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kemu-dev/kemu/test/testguest"
)

// On this kind of machine /dev/kvm exists but guests hang: the probe must
// say no within its timeout, and the cache must return the same verdict.
// On a runner with working KVM it must say yes. Both with a configured
// guest (the test guest, as the node agent's image carries it) and with
// what an installed kemuctl has (the host's kernel, else the built-in guest).
func TestProbe(t *testing.T) {
	a, err := testguest.Paths()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"test guest", Options{Kernel: a.Kernel, Initrd: a.Initrd}},
		{"installed", Options{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			o.CacheFile, o.Timeout = filepath.Join(t.TempDir(), "kvm.json"), 15*time.Second
			start := time.Now()
			v := Probe(context.Background(), o)
			took := time.Since(start)
			t.Logf("verdict %+v in %s", v, took)
			if took > o.Timeout+10*time.Second {
				t.Errorf("probe took %s, beyond its timeout", took)
			}
			if v.Reason == "" || v.Key == "" && openDevice("/dev/kvm") == "" {
				t.Errorf("verdict without reason or key: %+v", v)
			}
			again := Probe(context.Background(), o)
			if openDevice("/dev/kvm") == "" && (!again.Cached || again.Usable != v.Usable) {
				t.Errorf("second probe not from the cache: %+v", again)
			}
		})
	}
}

// Each probe guest really runs: under TCG every one reaches its ready
// marker, so a KVM verdict of "not ready" is KVM's doing, not the guest's.
func TestProbeGuestsBoot(t *testing.T) {
	a, err := testguest.Paths()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		o           Options
		hostKernels []string
		want        string
	}{
		{"test guest", Options{Kernel: a.Kernel, Initrd: a.Initrd}, nil, "a Linux guest booted"},
		// The test guest's kernel (Debian's) stands in for the host's,
		// which this machine does not have under /boot.
		{"host kernel", Options{}, []string{a.Kernel}, "the host's kernel " + a.Kernel},
		{"built-in", Options{}, []string{"/nonexistent/vmlinuz"}, "built-in probe guest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			withHostKernels(t, tc.hostKernels...)
			o := tc.o
			o.accel, o.cpu, o.Device, o.Timeout = "tcg", "max", "/dev/null", 60*time.Second
			g, err := chooseGuest(o, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			v := boot(context.Background(), withDefaults(o), g)
			t.Logf("%s: %+v in %s", tc.name, v, time.Since(start))
			if !v.Usable || !strings.Contains(v.Reason, tc.want) || !strings.Contains(v.Reason, "under TCG") {
				t.Errorf("verdict %+v, want usable: %q under TCG", v, tc.want)
			}
		})
	}
}

func TestProbeWithoutDevice(t *testing.T) {
	v := Probe(context.Background(), Options{Device: "/nonexistent/kvm"})
	if v.Usable || !strings.Contains(v.Reason, "/nonexistent/kvm") {
		t.Errorf("%+v", v)
	}
}
