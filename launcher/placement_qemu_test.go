//go:build qemu

package launcher

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const placementVMI = `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: placement}
spec:
  domain:
    cpu:
      dedicatedCpuPlacement: true
      isolateEmulatorThread: true
      numa: {guestMappingPassthrough: {}}
      realtime: {}
    memory: {guest: 256Mi, hugepages: {pageSize: 2Mi}}
    devices:
      autoattachPodInterface: false
      disks:
      - {name: root, disk: {bus: virtio}}
  volumes:
  - {name: root, containerDisk: {image: "oci:_out/testguest/oci/containerdisk"}}
`

// meminfo reads a /proc/meminfo figure.
func meminfo(t *testing.T, key string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			n, err := strconv.Atoi(strings.Fields(v)[0])
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/meminfo", key)
	return 0
}

// hugetlbfs adds 2 MiB pages to the host's pool (taken out again after,
// relative to the pool then: the e2e suite's test cluster adds and takes
// out its own pages, maybe meanwhile) and mounts a hugetlbfs of them
// (unmounted after).
func hugetlbfs(t *testing.T, pages int) string {
	t.Helper()
	const pool = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"
	read := func() int {
		b, err := os.ReadFile(pool)
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatalf("%s: %v", pool, err)
		}
		return n
	}
	n := read()
	if err := os.WriteFile(pool, []byte(strconv.Itoa(n+pages)), 0o644); err != nil {
		t.Fatalf("reserving hugepages: %v", err)
	}
	added := read() - n
	t.Cleanup(func() {
		if err := os.WriteFile(pool, []byte(strconv.Itoa(max(read()-added, 0))), 0o644); err != nil {
			t.Errorf("giving back %d hugepages (%s): %v", added, pool, err)
		}
	})
	if free := meminfo(t, "HugePages_Free"); free < pages {
		t.Fatalf("only %d hugepages free after reserving %d", free, pages)
	}
	dir := shortDir(t)
	if err := unix.Mount("nodev", dir, "hugetlbfs", 0, "pagesize=2M"); err != nil {
		t.Fatalf("mounting hugetlbfs: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	return dir
}

// One boot with every placement field on this 2-CPU host, with an explicit
// CPU set [1 0] (the cluster's kubelet can give a Pod only one exclusive
// CPU here): the vCPU thread is pinned to CPU 1 and runs SCHED_FIFO 1,
// every other QEMU thread (isolateEmulatorThread) to CPU 0; the guest's
// 256 MiB came from the hugetlbfs (HugePages_Free fell by 128 pages at
// start, prealloc); the guest sees one NUMA node holding its CPU (the host
// has one node).
func TestPlacementPinningHugepagesNUMA(t *testing.T) {
	dir := hugetlbfs(t, 160)
	cfg := newConfig(t, parseVMI(t, placementVMI))
	cfg.HugepagesDir = dir
	cfg.CPUs = []int{1, 0}
	free0 := meminfo(t, "HugePages_Free")
	t0 := time.Now()
	v := start(t, cfg)
	if used := free0 - meminfo(t, "HugePages_Free"); used < 128 {
		t.Errorf("HugePages_Free fell by %d pages, want at least 128 (256 MiB)", used)
	}
	ctx := ctxFor(t, 5*time.Minute)

	pid := int(v.l.qemuPID.Load())
	cpus, err := v.l.mon.QueryCPUsFast(ctx)
	if err != nil || len(cpus) != 1 {
		t.Fatalf("query-cpus-fast: %v %v", cpus, err)
	}
	vcpu := cpus[0].ThreadID
	tasks, err := qemuThreads(pid)
	if err != nil {
		t.Fatal(err)
	}
	for tid := range tasks {
		want := "0"
		if tid == vcpu {
			want = "1"
		}
		if got := cpusAllowed(t, pid, tid); got != want && !(tid != vcpu && got == "") {
			t.Errorf("QEMU thread %d (vCPU thread %d): Cpus_allowed_list %q, want %q", tid, vcpu, got, want)
		}
	}
	attr, err := unix.SchedGetAttr(vcpu, 0)
	if err != nil || attr.Policy != unix.SCHED_FIFO || attr.Priority != 1 {
		t.Errorf("vCPU thread's scheduling: %+v %v; want SCHED_FIFO priority 1", attr, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("hugetlbfs holds %d entries, want the VM's directory", len(entries))
	}

	pollPing(t, ctx, v.l, bootTimeout, "after boot")
	t.Logf("booted to the guest agent in %s", time.Since(t0))
	var out, errOut bytes.Buffer
	r, err := v.l.Exec(ctx, "ls -d /sys/devices/system/node/node*; cat /sys/devices/system/node/node0/cpulist", &out, &errOut)
	if err != nil || !r.OK() {
		t.Fatalf("guest exec: %+v %v %q", r, err, errOut.String())
	}
	if got := out.String(); got != "/sys/devices/system/node/node0\n0\n" {
		t.Errorf("guest NUMA nodes:\n%s", got)
	}
}

// cpusAllowed is a thread's Cpus_allowed_list ("" when it has gone).
func cpusAllowed(t *testing.T, pid, tid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/status", pid, tid))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no Cpus_allowed_list for thread %d", tid)
	return ""
}
