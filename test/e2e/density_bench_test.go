//go:build cluster && qemu

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/test/procmem"
)

// densityMemory is the guest RAM of the density benchmark's VMs.
const densityMemory = "128Mi"

// densityMax bounds the density benchmark (KEMU_DENSITY_MAX, default 200):
// it stops at the first VMI that fails to start, or there.
func densityMax(b *testing.B) int {
	if s := os.Getenv("KEMU_DENSITY_MAX"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("KEMU_DENSITY_MAX %q", s)
		}
		return n
	}
	return 200
}

// densitySamples are the VMI counts at which the node agent's and the
// controller's memory is sampled (and at the end, the density itself).
var densitySamples = []int{1, 10, 50}

// BenchmarkDensity fills one node with idle test-guest VMs (128Mi, TCG,
// containerDisk, masquerade; a 10m CPU request, so that the node's 2 CPUs
// of requests do not end it at 19 VMs), one after another, until the first
// fails to start (or KEMU_DENSITY_MAX): the density and what stopped it.
// With the guests booted (guest agent connected; waited for at most
// densityBootWait) it measures each VM: the
// Pod's memory working set (the kubelet's: usage − inactive file) against
// its memory request, QEMU's RSS, kemu-launcher's RSS and PSS; each VM's
// cost (QEMU RSS + launcher PSS) against its guest RAM; OOM kills (none
// allowed). The node agent's and the controller's RSS are sampled with 1,
// 10 and 50 VMIs.
//
//	go test -tags 'cluster qemu' -run '^$' -bench Density -benchtime 1x -timeout 60m ./test/e2e/
func BenchmarkDensity(b *testing.B) {
	ev := need(b)
	dumpOnFailure(b, ev)
	node := ev.c.Nodes[0].Name
	limit := densityMax(b)
	for i := 0; i < b.N; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 55*time.Minute)
		sel := fmt.Sprintf("kemu-e2e=density-%d", i)
		b.Cleanup(func() { ev.c.Kubectl("-n", ns, "delete", "vmi", "-l", sel, "--ignore-not-found", "--timeout=10m") }) //nolint:errcheck // best effort
		var names []string
		stopped := fmt.Sprintf("KEMU_DENSITY_MAX=%d reached", limit)
		agentRSS, controllerRSS := map[int]float64{}, map[int]float64{}
		for n := 1; n <= limit; n++ {
			name := fmt.Sprintf("density-%d-%d", i, n)
			vmi := &v1.VirtualMachineInstance{}
			m := vmiManifest(vmiOptions{name: name, node: node, memory: densityMemory, cpuRequest: "10m",
				labels: map[string]string{"kemu-e2e": strings.TrimPrefix(sel, "kemu-e2e=")}})
			if err := yaml.UnmarshalStrict([]byte(m), vmi); err != nil {
				b.Fatal(err)
			}
			if _, err := ev.kemu.KemuV1alpha1().VirtualMachineInstances(ns).Create(ctx, vmi, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
			if why := ev.waitStarted(ctx, b, name); why != "" {
				stopped = fmt.Sprintf("VMI %d did not start: %s", n, why)
				break
			}
			names = append(names, name)
			if slices.Contains(densitySamples, n) {
				ev.waitAgents(ctx, b, names, densityBootWait)
				agentRSS[n], controllerRSS[n] = kemuProcessRSS(b, "kemu-nodeagent", node), kemuProcessRSS(b, "kemu-controller", "")
			}
		}
		booted := ev.waitAgents(ctx, b, names, densityBootWait)
		b.ReportMetric(float64(booted), "guests-booted")
		d := len(names)
		agentRSS[d], controllerRSS[d] = kemuProcessRSS(b, "kemu-nodeagent", node), kemuProcessRSS(b, "kemu-controller", "")
		vms := ev.measureVMs(ctx, b, node, sel)
		b.ReportMetric(float64(d), "vms")
		report := func(unit string, f func(vmMemory) float64) {
			var v []float64
			for _, m := range vms {
				v = append(v, f(m))
			}
			b.ReportMetric(median(v), unit+"-median")
			b.ReportMetric(slices.Max(v), unit+"-max")
		}
		report("MiB-QEMU-RSS", func(m vmMemory) float64 { return procmem.MiB(m.qemu.RSS) })
		report("MiB-launcher-RSS", func(m vmMemory) float64 { return procmem.MiB(m.launcher.RSS) })
		report("MiB-launcher-PSS", func(m vmMemory) float64 { return procmem.MiB(m.launcher.PSS) })
		report("MiB-pod-working-set", func(m vmMemory) float64 { return procmem.MiB(m.workingSet) })
		report("x-working-set/request", func(m vmMemory) float64 { return float64(m.workingSet) / float64(m.request) })
		report("x-cost/guest-RAM", func(m vmMemory) float64 {
			return float64(m.qemu.RSS+m.launcher.PSS) / float64(m.guest)
		})
		for _, n := range append(slices.Clone(densitySamples), d) {
			if rss, ok := agentRSS[n]; ok {
				b.ReportMetric(rss, fmt.Sprintf("MiB-nodeagent-RSS-%dvmis", n))
				b.ReportMetric(controllerRSS[n], fmt.Sprintf("MiB-controller-RSS-%dvmis", n))
			}
		}
		ooms := ev.oomKills(ctx, b, sel)
		b.ReportMetric(float64(ooms), "oom-kills")
		b.Logf("%d VMs of %s on %s (%s), %d guests booted; request %.0f MiB each; OOM kills %d", d, densityMemory, node, stopped,
			booted, procmem.MiB(vms[0].request), ooms)
		ev.kubectl(b, "-n", ns, "delete", "vmi", "-l", sel, "--timeout=10m")
		ev.waitPodsGone(ctx, b, sel)
		cancel()
	}
}

// waitStarted waits until the VMI is Running (""), or says why it will
// not start: final, or its Pod unschedulable.
func (ev *env) waitStarted(ctx context.Context, b *testing.B, name string) string {
	b.Helper()
	why := ""
	err := poll(ctx, 200*time.Millisecond, func() error {
		vmi, err := ev.getVMI(ctx, name)
		if err != nil || vmi == nil {
			return fmt.Errorf("VMI %s: %v", name, err)
		}
		switch {
		case vmi.Status.Phase == v1.Running:
			return nil
		case vmi.Status.Phase.IsFinal():
			why = fmt.Sprintf("%s: %s", vmi.Status.Phase, vmi.Status.Reason)
			return nil
		}
		for _, c := range vmi.Status.Conditions {
			if string(c.Type) == string(corev1.PodScheduled) && c.Status == corev1.ConditionFalse {
				why = fmt.Sprintf("unschedulable: %s", c.Message)
				return nil
			}
		}
		return fmt.Errorf("VMI %s is %s", name, vmi.Status.Phase)
	})
	if err != nil {
		b.Fatalf("waiting for VMI %s to start: %v", name, err)
	}
	return why
}

// densityBootWait bounds the wait for the guests to boot before a
// measurement: under TCG, dozens of guests on 2 cores boot slowly, and one
// starved long enough stalls for good (RCU stalls, seen at 50) — what is
// measured then is said (guests-booted).
const densityBootWait = 3 * time.Minute

// waitAgents waits, at most limit, until every VMI's guest agent is
// connected (the guests booted, and idle), and returns how many are.
func (ev *env) waitAgents(ctx context.Context, b *testing.B, names []string, limit time.Duration) int {
	b.Helper()
	wctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	booted := 0
	err := poll(wctx, 2*time.Second, func() error {
		booted = 0
		for _, n := range names {
			vmi, err := ev.getVMI(wctx, n)
			if err != nil || vmi == nil {
				return fmt.Errorf("VMI %s: %v", n, err)
			}
			if c, ok := vmiCondition(vmi, v1.VirtualMachineInstanceAgentConnected); ok && c.Status == corev1.ConditionTrue {
				booted++
			}
		}
		if booted < len(names) {
			return fmt.Errorf("%d of %d guests booted", booted, len(names))
		}
		return nil
	})
	if err != nil {
		b.Logf("after %s: %v", limit, err)
	}
	return booted
}

func vmiCondition(vmi *v1.VirtualMachineInstance, t v1.VirtualMachineInstanceConditionType) (v1.VirtualMachineInstanceCondition, bool) {
	for _, c := range vmi.Status.Conditions {
		if c.Type == t {
			return c, true
		}
	}
	return v1.VirtualMachineInstanceCondition{}, false
}

// vmMemory is one VM's memory on the node.
type vmMemory struct {
	qemu, launcher procmem.Usage
	// workingSet is the Pod cgroup's usage less its inactive file pages
	// (the kubelet's working set); request is the Pod's memory request;
	// guest is the guest RAM.
	workingSet, request, guest int64
}

// measureVMs reads each Running launcher Pod of sel on node: its cgroup
// and its processes (found by the Pod's cgroup in /proc).
func (ev *env) measureVMs(ctx context.Context, b *testing.B, node, sel string) []vmMemory {
	b.Helper()
	pods, err := ev.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: launcherpod.AppLabel + "=" + launcherpod.AppLauncher})
	if err != nil {
		b.Fatal(err)
	}
	guest := resourceMiB(b, densityMemory)
	var out []vmMemory
	for _, p := range pods.Items {
		if p.Spec.NodeName != node || p.Status.Phase != corev1.PodRunning || !strings.HasPrefix(p.Labels[launcherpod.VMINameLabel], "density-") {
			continue
		}
		m := vmMemory{guest: guest}
		for _, c := range p.Spec.Containers {
			if c.Name == launcherpod.ComputeContainer {
				m.request = c.Resources.Requests.Memory().Value()
			}
		}
		pids := podProcesses(b, string(p.UID))
		for _, pid := range pids {
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			u, err := procmem.Read(pid)
			if err != nil {
				continue // gone meanwhile
			}
			switch strings.TrimSpace(string(comm)) {
			case "kemu-launcher":
				m.launcher = u
			case "qemu-system-x86":
				m.qemu = u
			}
		}
		if m.launcher.RSS == 0 || m.qemu.RSS == 0 {
			b.Fatalf("Pod %s: no kemu-launcher or QEMU among its processes %v", p.Name, pids)
		}
		m.workingSet = podWorkingSet(b, node, string(p.UID))
		out = append(out, m)
	}
	if len(out) == 0 {
		b.Fatal("no launcher Pod measured")
	}
	return out
}

func resourceMiB(b *testing.B, q string) int64 {
	b.Helper()
	n, err := strconv.ParseInt(strings.TrimSuffix(q, "Mi"), 10, 64)
	if err != nil {
		b.Fatal(err)
	}
	return n << 20
}

// podProcesses are the pids whose cgroup (any hierarchy) is under the
// Pod's (pod<uid>, the kubelet's cgroupfs names).
func podProcesses(b *testing.B, uid string) []int {
	b.Helper()
	return procsWhere(b, func(cgroup string) bool { return strings.Contains(cgroup, "/pod"+uid+"/") })
}

func procsWhere(b *testing.B, match func(cgroup string) bool) []int {
	b.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err == nil && match(string(cg)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// kemuProcessRSS is the largest RSS, in MiB, of the processes named comm
// (on node's cgroups when node is not ""): the controller's leader, or the
// node's agent.
func kemuProcessRSS(b *testing.B, comm, node string) float64 {
	b.Helper()
	var most int64
	for _, pid := range procsWhere(b, func(cg string) bool { return node == "" || strings.Contains(cg, "/"+node+"/") }) {
		c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if strings.TrimSpace(string(c)) != comm {
			continue
		}
		if u, err := procmem.Read(pid); err == nil && u.RSS > most {
			most = u.RSS
		}
	}
	if most == 0 {
		b.Fatalf("no %s process (node %q)", comm, node)
	}
	return procmem.MiB(most)
}

// podWorkingSet is the Pod's memory cgroup usage less its inactive file
// pages, as the kubelet counts a working set (cgroup v1 memory hierarchy,
// the test nodes' kubepods under /sys/fs/cgroup/memory/<node>/).
func podWorkingSet(b *testing.B, node, uid string) int64 {
	b.Helper()
	matches, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/memory", node, "kubepods", "*", "pod"+uid))
	if len(matches) != 1 {
		b.Fatalf("the memory cgroup of Pod %s on %s: %v", uid, node, matches)
	}
	usage := readInt(b, filepath.Join(matches[0], "memory.usage_in_bytes"))
	f, err := os.Open(filepath.Join(matches[0], "memory.stat"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "total_inactive_file "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return max(usage-n, 0)
		}
	}
	return usage
}

func readInt(b *testing.B, path string) int64 {
	b.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// oomKills counts the launcher Pods of sel whose containers were killed for
// memory, and the VMIs of sel that failed.
func (ev *env) oomKills(ctx context.Context, b *testing.B, sel string) int {
	b.Helper()
	var n int
	pods, err := ev.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: launcherpod.AppLabel + "=" + launcherpod.AppLauncher})
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range pods.Items {
		for _, cs := range p.Status.ContainerStatuses {
			for _, st := range []corev1.ContainerState{cs.State, cs.LastTerminationState} {
				if st.Terminated != nil && st.Terminated.Reason == "OOMKilled" {
					n++
				}
			}
		}
	}
	vmis, err := ev.kemu.KemuV1alpha1().VirtualMachineInstances(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		b.Fatal(err)
	}
	for _, v := range vmis.Items {
		if v.Status.Phase == v1.Failed {
			n++
		}
	}
	return n
}
