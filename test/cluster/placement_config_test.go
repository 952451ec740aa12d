//go:build linux

package cluster

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
)

// The kubelet's configuration is what the kubelet reads (strict: no
// misspelt field), with the static CPU manager policy and its reservation
// only when asked.
func TestKubeletConfigCPUManager(t *testing.T) {
	for _, tc := range []struct {
		static     bool
		wantPolicy string
		wantCPU    string
	}{
		{static: false},
		{static: true, wantPolicy: "static", wantCPU: StaticCPUReservation},
	} {
		n := &Node{Name: "kemu-node-1", IP: "10.250.0.11", ContainerdSocket: "/x/containerd.sock"}
		var cfg kubeletv1beta1.KubeletConfiguration
		if err := yaml.UnmarshalStrict([]byte(kubeletConfigYAML(n, Options{StaticCPUManager: tc.static})), &cfg); err != nil {
			t.Fatalf("static=%v: %v", tc.static, err)
		}
		if cfg.CPUManagerPolicy != tc.wantPolicy || cfg.SystemReserved["cpu"] != tc.wantCPU || len(cfg.ReservedSystemCPUs) != 0 {
			t.Errorf("static=%v: cpuManagerPolicy %q, systemReserved %v, reservedSystemCPUs %q; want %q, cpu %q, none",
				tc.static, cfg.CPUManagerPolicy, cfg.SystemReserved, cfg.ReservedSystemCPUs, tc.wantPolicy, tc.wantCPU)
		}
		if cfg.CgroupRoot != "/kemu-node-1" || cfg.HealthzBindAddress != n.IP {
			t.Errorf("static=%v: cgroupRoot %q, healthz %q", tc.static, cfg.CgroupRoot, cfg.HealthzBindAddress)
		}
	}
}

// Hugepages are added to the pool and taken out again relative to what
// the pool holds then (someone else's pages added meanwhile stay), on the
// record in the lock file while added, and given back once only.
func TestHugepagesReserveRelease(t *testing.T) {
	dir := t.TempDir()
	pool := filepath.Join(dir, "nr_hugepages")
	old := hugepages2MiPool
	hugepages2MiPool = pool
	t.Cleanup(func() { hugepages2MiPool = old })
	setPool := func(n int) {
		if err := os.WriteFile(pool, []byte(strconv.Itoa(n)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	getPool := func() int {
		n, err := readPool()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	lock, err := os.Create(filepath.Join(dir, "lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()

	setPool(10)
	h := captureHost(dir, nil)
	if err := reserveHugepages(lock, h, 128); err != nil {
		t.Fatal(err)
	}
	if got := getPool(); got != 138 {
		t.Fatalf("pool %d after adding 128 to 10", got)
	}
	saved, err := loadHostState(lock)
	if err != nil || saved == nil || saved.HugePages2Mi != 128 {
		t.Fatalf("record %+v %v: want 128 hugepages on it", saved, err)
	}
	setPool(getPool() + 160) // another user adds its own
	if err := releaseHugepages(saved); err != nil {
		t.Fatal(err)
	}
	if got := getPool(); got != 170 {
		t.Errorf("pool %d after giving back 128 of 298, want 170", got)
	}
	if err := releaseHugepages(saved); err != nil || getPool() != 170 {
		t.Errorf("a second release: pool %d, %v; want 170 (given back once)", getPool(), err)
	}
	setPool(5) // the other user took more than it added: never below zero
	h.HugePages2Mi = 128
	if err := releaseHugepages(h); err != nil || getPool() != 0 {
		t.Errorf("release below zero: pool %d, %v; want 0", getPool(), err)
	}
	if b, _ := os.ReadFile(pool); !strings.HasPrefix(string(b), "0") {
		t.Errorf("pool file %q", b)
	}
}
