//go:build cluster && qemu

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kemu-dev/kemu/api/launcherpod"
	"github.com/kemu-dev/kemu/test/cluster"
)

// placementHugepages is how many 2 MiB hugepages the suite's cluster adds
// to the host's pool (cluster.Options.HugePages2Mi): 256 MiB, room for
// TestPlacement's 128 MiB guest. Every node reports them as its
// hugepages-2Mi capacity (both see the host's one pool).
const placementHugepages = 128

// placementManifest is a kernel-boot VMI of the test guest with dedicated
// CPUs and its 128 MiB in 2 MiB hugepages; isolate adds
// isolateEmulatorThread.
func placementManifest(name string, isolate bool) string {
	return fmt.Sprintf(`apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  terminationGracePeriodSeconds: 30
  domain:
    cpu: {dedicatedCpuPlacement: true, isolateEmulatorThread: %[4]t}
    memory: {guest: 128Mi, hugepages: {pageSize: 2Mi}}
    firmware:
      kernelBoot:
        kernelArgs: console=ttyS0 kemu.dhcp=0
        container: {image: %[3]s, imagePullPolicy: IfNotPresent, kernelPath: /boot/vmlinuz, initrdPath: /boot/initrd.img}
    devices: {autoattachPodInterface: false}
`, name, ns, kernelBootImage, isolate)
}

// TestPlacement is issue 23's proof of CPU and memory placement on a real
// node: the suite's kubelets run the static CPU manager policy (CPU 0
// kept for the shared pool, the others exclusive: CPU 1 on this 2-CPU
// machine) and see 2 MiB hugepages (cluster.Options StaticCPUManager,
// HugePages2Mi). One VMI with dedicatedCpuPlacement and hugepages pageSize
// 2Mi: its launcher Pod is Guaranteed; the kubelet's CPU manager state
// file gives the compute container exclusive CPUs, outside the shared
// pool; they are the launcher's and QEMU's cgroup cpuset (read on the
// host); the first is the only CPU in the affinity of QEMU's vCPU thread
// (QMP query-cpus-fast's thread id, mapped to its host thread with NSpid,
// sched_getaffinity on the host), and the launcher says it pinned vCPU 0
// there; QEMU's guest RAM is hugetlbfs pages of the Pod's HugePages-2Mi
// emptyDir (its smaps); the guest boots and has 1 CPU and its memory
// (MemTotal 64–128 MiB).
//
// isolateEmulatorThread needs one exclusive CPU more. On a node with one
// exclusive CPU (this machine) a second VMI asking for it stays
// unschedulable with the scheduler's "Insufficient cpu"; on a node with
// two or more (a CI runner with more CPUs) the VMI itself asks for it,
// and QEMU's main thread is on the second CPU, the vCPU alone on the
// first.
func TestPlacement(t *testing.T) {
	ev := need(t)
	dumpOnFailure(t, ev)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const name, isolated = "placed", "placed-isolated"
	t.Cleanup(func() {
		ev.c.Kubectl("-n", ns, "delete", "vmi", name, isolated, "--ignore-not-found", "--timeout=3m") //nolint:errcheck // best effort
	})
	// Every node is this machine: its CPUs less the one the static
	// policy keeps shared (StaticCPUReservation rounded up) are exclusive.
	first, err := ev.kube.CoreV1().Nodes().Get(ctx, ev.c.Nodes[0].Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	exclusiveCPUs := first.Status.Capacity.Cpu().Value() - 1
	isolate := exclusiveCPUs >= 2
	t.Logf("nodes: %d CPUs, %d exclusive: isolateEmulatorThread %s", first.Status.Capacity.Cpu().Value(), exclusiveCPUs,
		map[bool]string{true: "on the VMI", false: "shown unschedulable"}[isolate])
	free0 := meminfoKB(t, "HugePages_Free")
	t0 := time.Now()
	if !isolate {
		ev.apply(t, placementManifest(isolated, true))
	}
	ev.apply(t, placementManifest(name, isolate))

	if !isolate {
		// 1 vCPU + 1 emulator CPU = a 2-CPU Pod; a node's allocatable CPU
		// is 2 − StaticCPUReservation.
		err := poll(ctx, 250*time.Millisecond, func() error {
			vmi, err := ev.getVMI(ctx, isolated)
			if err != nil || vmi == nil {
				return fmt.Errorf("VMI %s: %v", isolated, err)
			}
			c := condition(vmi, "PodScheduled")
			if c == nil || c.Status != corev1.ConditionFalse || c.Reason != corev1.PodReasonUnschedulable || !strings.Contains(c.Message, "Insufficient cpu") {
				return fmt.Errorf("VMI %s phase %s, PodScheduled %+v; want False Unschedulable, Insufficient cpu", isolated, vmi.Status.Phase, c)
			}
			t.Logf("isolateEmulatorThread on a node with 1 exclusive CPU: PodScheduled False %s: %s", c.Reason, c.Message)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		pods, err := ev.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: launcherpod.VMINameLabel + "=" + isolated})
		if err != nil || len(pods.Items) != 1 {
			t.Fatalf("launcher Pods of %s: %v %v", isolated, pods, err)
		}
		if cpu := pods.Items[0].Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]; cpu.Cmp(resource.MustParse("2")) != 0 {
			t.Errorf("isolateEmulatorThread Pod requests %s CPUs, want 2", cpu.String())
		}
		ev.kubectl(t, "-n", ns, "delete", "vmi", isolated, "--wait=false")
	}

	vmi := ev.waitRunning(ctx, t, name, bootTimeout)
	t.Logf("%s Running on %s %s after the apply", name, vmi.Status.NodeName, time.Since(t0).Round(time.Millisecond))
	node := ev.c.Node(vmi.Status.NodeName)
	if node == nil {
		t.Fatalf("VMI on %q, not a node of the cluster", vmi.Status.NodeName)
	}
	pods, err := ev.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: launcherpod.VMINameLabel + "=" + name})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("launcher Pods of %s: %v %v", name, pods, err)
	}
	pod := pods.Items[0]
	if pod.Status.QOSClass != corev1.PodQOSGuaranteed {
		t.Errorf("launcher Pod %s QoS %s, want Guaranteed", pod.Name, pod.Status.QOSClass)
	}
	k8sNode, err := ev.kube.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hp := k8sNode.Status.Capacity["hugepages-2Mi"]
	t.Logf("node %s: capacity hugepages-2Mi %s, allocatable cpu %s", node.Name, hp.String(), k8sNode.Status.Allocatable.Cpu())
	if hp.Value() < placementHugepages<<21 {
		t.Errorf("node %s reports hugepages-2Mi %s, want at least %d pages", node.Name, hp.String(), placementHugepages)
	}

	// The kubelet's static CPU manager: its state file names the compute
	// container's CPUs, which are out of the shared pool.
	state := cpuManagerState(t, node)
	if state.PolicyName != "static" {
		t.Fatalf("cpu_manager_state policy %q, want static", state.PolicyName)
	}
	exclusive := parseCPUs(t, state.Entries[string(pod.UID)][launcherpod.ComputeContainer])
	shared := parseCPUs(t, state.DefaultCPUSet)
	t.Logf("cpu_manager_state: compute container %v, shared pool %v", exclusive, shared)
	want := 1
	if isolate {
		want = 2
	}
	if len(exclusive) != want || slices.ContainsFunc(exclusive, func(c int) bool { return slices.Contains(shared, c) }) {
		t.Fatalf("cpu_manager_state %+v: the compute container of Pod %s should have %d CPUs outside the shared pool", state, pod.UID, want)
	}
	// The launcher pins vCPU 0 to its first CPU; the other QEMU threads to
	// the next one with isolateEmulatorThread, else to all of its CPUs.
	vcpuCPU, emulatorCPUs := exclusive[0], exclusive
	if isolate {
		emulatorCPUs = exclusive[1:2]
	}

	// The container's cgroup cpuset, the launcher's and QEMU's, on the host.
	lpid, err := launcherPid(string(pod.UID))
	if err != nil {
		t.Fatal(err)
	}
	qpid := qemuPid(ctx, t, name)
	for _, p := range []struct {
		what string
		pid  int
	}{{"kemu-launcher", lpid}, {"QEMU", qpid}} {
		path, cpus := cgroupCPUs(t, p.pid)
		if !slices.Equal(cpus, exclusive) {
			t.Errorf("%s (pid %d): cgroup cpuset %s = %v, want %v", p.what, p.pid, path, cpus, exclusive)
		} else {
			t.Logf("%s (pid %d): %s = %v", p.what, p.pid, path, cpus)
		}
	}

	// QEMU's vCPU thread, as QEMU reports it, and its main thread, on the
	// host.
	out := ev.run(ctx, t, "shell", name, "-n", ns, "-o", "json", "-c", "qmp query-cpus-fast")
	var reply struct {
		Return []struct {
			CPUIndex int `json:"cpu-index"`
			ThreadID int `json:"thread-id"`
		} `json:"return"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &reply); err != nil || len(reply.Return) != 1 {
		t.Fatalf("query-cpus-fast: %v %q", err, out)
	}
	tid, comm := hostThread(t, qpid, reply.Return[0].ThreadID)
	for _, th := range []struct {
		what string
		tid  int
		want []int
	}{{fmt.Sprintf("vCPU 0 (QEMU thread %d, host thread %d %q)", reply.Return[0].ThreadID, tid, comm), tid, []int{vcpuCPU}},
		{fmt.Sprintf("QEMU's main thread (host %d)", qpid), qpid, emulatorCPUs}} {
		if got := affinity(t, th.tid); !slices.Equal(got, th.want) {
			t.Errorf("%s: sched_getaffinity %v, want %v", th.what, got, th.want)
		} else {
			t.Logf("%s: sched_getaffinity %v", th.what, got)
		}
	}
	logs := ev.kubectl(t, "-n", ns, "logs", pod.Name, "-c", launcherpod.ComputeContainer)
	if !strings.Contains(logs, `"QEMU's threads pinned"`) || !strings.Contains(logs, fmt.Sprintf("vcpuCPUs=[%d] emulatorCPUs=%s", vcpuCPU, cpuSlice(emulatorCPUs))) {
		t.Errorf("the launcher's log has no \"QEMU's threads pinned\" with vcpuCPUs=[%d] emulatorCPUs=%s:\n%s", vcpuCPU, cpuSlice(emulatorCPUs), tail(logs, 3000))
	}

	// Guest RAM in hugepages: QEMU maps its file in the Pod's hugetlbfs.
	files, kb := hugetlbMapped(t, qpid)
	if kb < 128<<10 || len(files) != 1 || !strings.Contains(files[0], "/kemu/hugepages/") {
		t.Errorf("QEMU maps %d KiB of hugepages from %q, want the guest's 128 MiB from a file in the Pod's %s", kb, files, launcherpod.HugepagesDir)
	} else {
		t.Logf("QEMU maps %s: %d KiB in hugepages", files[0], kb)
	}
	t.Logf("host HugePages_Free %d → %d (the host's pool, shared)", free0, meminfoKB(t, "HugePages_Free"))

	// The guest boots on it.
	ready := ev.readyMarker(ctx, t, name)
	memKB, _ := strconv.Atoi(ready.Field("mem_kb"))
	// MemTotal: the 128 MiB less what the kernel keeps (78 MiB measured).
	if ready.Field("cpus") != "1" || memKB < 64<<10 || memKB > 128<<10 {
		t.Errorf("the guest's ready marker: cpus %q mem_kb %d, want 1 CPU and 64–128 MiB: %s", ready.Field("cpus"), memKB, ready.Raw)
	}
	t.Logf("guest ready %s after the apply: %s", time.Since(t0).Round(time.Millisecond), ready.Raw)

	ev.deleteVMI(ctx, t, name)
	if !isolate {
		ev.waitPodsGone(ctx, t, launcherpod.VMINameLabel+"="+isolated)
	}
}

// affinity is a thread's CPU affinity (sched_getaffinity).
func affinity(t *testing.T, tid int) []int {
	t.Helper()
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(tid, &set); err != nil {
		t.Fatalf("sched_getaffinity(%d): %v", tid, err)
	}
	var out []int
	for c := 0; c < 4096 && len(out) < set.Count(); c++ {
		if set.IsSet(c) {
			out = append(out, c)
		}
	}
	return out
}

// cpuSlice is how klog writes a []int: [1 2].
func cpuSlice(cpus []int) string { return fmt.Sprint(cpus) }

// cpuManagerStateFile is the kubelet's CPU manager checkpoint in its root.
type cpuManagerStateFile struct {
	PolicyName    string                       `json:"policyName"`
	DefaultCPUSet string                       `json:"defaultCpuSet"`
	Entries       map[string]map[string]string `json:"entries"`
}

func cpuManagerState(t *testing.T, n *cluster.Node) cpuManagerStateFile {
	t.Helper()
	path := n.HostPath(filepath.Join(cluster.KubeletRoot, "cpu_manager_state"))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s cpuManagerStateFile
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("%s: %v: %s", path, err, b)
	}
	return s
}

// parseCPUs reads the kernel's CPU list format ("0-1,3").
func parseCPUs(t *testing.T, s string) []int {
	t.Helper()
	var out []int
	for _, part := range strings.Split(strings.TrimSpace(s), ",") {
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(hi)
		}
		if err != nil || b < a || b-a > 4096 {
			t.Fatalf("bad CPU list %q", s)
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	return out
}

// cgroupCPUs is the effective cpuset of pid's cgroup as the host sees it:
// the cgroup v1 cpuset hierarchy's cpuset.effective_cpus, else cgroup v2's
// cpuset.cpus.effective.
func cgroupCPUs(t *testing.T, pid int) (string, []int) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	var v1Path, v2Path string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[0] == "0" && f[1] == "" {
			v2Path = f[2]
		} else if slices.Contains(strings.Split(f[1], ","), "cpuset") {
			v1Path = f[2]
		}
	}
	var path string
	switch {
	case v1Path != "":
		path = filepath.Join(cgroupMount(t, "cgroup", "cpuset"), v1Path, "cpuset.effective_cpus")
	case v2Path != "":
		path = filepath.Join(cgroupMount(t, "cgroup2", ""), v2Path, "cpuset.cpus.effective")
	default:
		t.Fatalf("pid %d: no cpuset cgroup in %q", pid, b)
	}
	cpus, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, parseCPUs(t, string(cpus))
}

// cgroupMount is the host's mount point of a cgroup hierarchy: fstype
// cgroup2, or cgroup with the controller among its options.
func cgroupMount(t *testing.T, fstype, controller string) string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if sep < 5 || sep+3 >= len(fields) || fields[sep+1] != fstype {
			continue
		}
		if controller == "" || slices.Contains(strings.Split(fields[sep+3], ","), controller) {
			return fields[4]
		}
	}
	t.Fatalf("no %s mount %s in /proc/self/mountinfo", fstype, controller)
	return ""
}

// hostThread maps a thread id in QEMU's PID namespace (the launcher Pod's)
// to the host's (the last NSpid field is the innermost namespace's).
func hostThread(t *testing.T, pid, nsTid int) (int, string) {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "status"))
		if err != nil {
			continue
		}
		var comm string
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Name:"); ok {
				comm = strings.TrimSpace(v)
			}
			if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
				f := strings.Fields(v)
				if len(f) > 0 && f[len(f)-1] == strconv.Itoa(nsTid) {
					tid, _ := strconv.Atoi(e.Name())
					return tid, comm
				}
			}
		}
	}
	t.Fatalf("QEMU (host pid %d) has no thread %d in its PID namespace", pid, nsTid)
	return 0, ""
}

// hugetlbMapped is what pid maps in hugepages (smaps' Private_Hugetlb +
// Shared_Hugetlb, KiB) and from which files.
func hugetlbMapped(t *testing.T, pid int) ([]string, int) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	var file string
	kb := 0
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 5 && !strings.HasSuffix(f[0], ":") {
			// A mapping's header: address perms offset dev inode [path].
			file = strings.Join(f[5:], " ")
			continue
		}
		if len(f) >= 2 && (f[0] == "Private_Hugetlb:" || f[0] == "Shared_Hugetlb:") {
			if n, _ := strconv.Atoi(f[1]); n > 0 {
				kb += n
				if !slices.Contains(files, file) {
					files = append(files, file)
				}
			}
		}
	}
	return files, kb
}

// meminfoKB is a /proc/meminfo figure of the host.
func meminfoKB(t *testing.T, key string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				n, _ := strconv.Atoi(f[0])
				return n
			}
		}
	}
	t.Fatalf("no %s in /proc/meminfo", key)
	return 0
}
