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
// On a runner with working KVM it must say yes.
func TestProbe(t *testing.T) {
	a, err := testguest.Paths()
	if err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(t.TempDir(), "kvm.json")
	o := Options{Kernel: a.Kernel, Initrd: a.Initrd, CacheFile: cache, Timeout: 15 * time.Second}
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
}

func TestProbeWithoutDevice(t *testing.T) {
	v := Probe(context.Background(), Options{Device: "/nonexistent/kvm"})
	if v.Usable || !strings.Contains(v.Reason, "/nonexistent/kvm") {
		t.Errorf("%+v", v)
	}
}

func TestProbeWithoutGuest(t *testing.T) {
	if openDevice("/dev/kvm") != "" {
		t.Skip("no usable /dev/kvm device: the guest is never needed")
	}
	v := Probe(context.Background(), Options{})
	if v.Usable || !strings.Contains(v.Reason, "no probe guest") {
		t.Errorf("%+v", v)
	}
}
