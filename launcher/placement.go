package launcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/api/validation"
	"github.com/kemu-dev/kemu/launcher/cmdline"
	"github.com/kemu-dev/kemu/launcher/unpriv"
)

// Bounds on what the launcher reads about CPUs and QEMU's threads.
const (
	maxHostCPUs    = 4096
	maxQEMUThreads = 4096
	maxCPUListLen  = 64 << 10
)

// placement is where the VM runs on this host (dedicatedCpuPlacement,
// isolateEmulatorThread, numa, realtime, hugepages): decided in prepare,
// applied to QEMU's threads before the guest runs (pin).
type placement struct {
	// vcpuCPUs[i] is the host CPU vCPU i is pinned to; nil: no pinning.
	vcpuCPUs []int
	// emulator are the host CPUs of every other QEMU thread.
	emulator []int
	// realtime[i]: vCPU i runs SCHED_FIFO priority 1.
	realtime []bool
	// hugepagesDir is the launcher's directory on hugetlbfs ("" = none);
	// removed when the VM ends.
	hugepagesDir string
	numa         []cmdline.NUMANode
}

// ownCPUs are the host CPUs the launcher may run on: its cgroup v2
// cpuset.cpus.effective (the kubelet's static CPU manager writes the
// container's exclusive CPUs there), intersected with its affinity; only
// the affinity without a cgroup v2 cpuset.
func ownCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	var cpus []int
	for c := 0; c < maxHostCPUs; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	if path, ok := ownCgroupV2(); ok {
		b, err := readBounded(filepath.Join("/sys/fs/cgroup", path, "cpuset.cpus.effective"))
		if err == nil {
			cg, err := parseCPUList(strings.TrimSpace(string(b)))
			if err != nil {
				return nil, fmt.Errorf("cpuset.cpus.effective: %w", err)
			}
			cpus = slices.DeleteFunc(cpus, func(c int) bool { return !slices.Contains(cg, c) })
		}
	}
	return cpus, nil
}

// ownCgroupV2 is the launcher's cgroup v2 path ("0::/path").
func ownCgroupV2() (string, bool) {
	b, err := readBounded("/proc/self/cgroup")
	if err != nil {
		return "", false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return filepath.Clean("/" + p), true
		}
	}
	return "", false
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, maxCPUListLen)
	n, err := f.Read(buf)
	if err != nil && n == 0 {
		return nil, err
	}
	return buf[:n], nil
}

// parseCPUList reads the kernel's CPU list format ("0-3,8,10-11").
func parseCPUList(s string) ([]int, error) {
	var out []int
	if s == "" {
		return nil, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 || a >= maxHostCPUs {
			return nil, fmt.Errorf("bad CPU list %q", s)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a || b >= maxHostCPUs {
				return nil, fmt.Errorf("bad CPU list %q", s)
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	return out, nil
}

// hostNodeOf maps host CPUs to their NUMA nodes
// (/sys/devices/system/node/node*/cpulist); CPUs of no node are node 0.
func hostNodeOf(sysNode string) (map[int]int, error) {
	dirs, err := filepath.Glob(filepath.Join(sysNode, "node[0-9]*"))
	if err != nil {
		return nil, err
	}
	out := map[int]int{}
	for _, d := range dirs {
		n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "node"))
		if err != nil {
			continue
		}
		b, err := readBounded(filepath.Join(d, "cpulist"))
		if err != nil {
			return nil, err
		}
		cpus, err := parseCPUList(strings.TrimSpace(string(b)))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d, err)
		}
		for _, c := range cpus {
			out[c] = n
		}
	}
	return out, nil
}

// planPlacement decides the VM's placement from the VMI and this host.
func (l *Launcher) planPlacement() (*placement, error) {
	d := &l.vmi.Spec.Domain
	p := &placement{}
	if d.CPU.DedicatedCPUPlacement {
		cpus := l.cfg.CPUs
		if cpus == nil {
			var err error
			if cpus, err = ownCPUs(); err != nil {
				return nil, fmt.Errorf("launcher: spec.domain.cpu.dedicatedCpuPlacement: the launcher's CPUs: %w", err)
			}
		}
		vcpus := int(d.CPU.Sockets * d.CPU.Cores * d.CPU.Threads)
		need := vcpus
		if d.CPU.IsolateEmulatorThread {
			need++
		}
		if len(cpus) < need {
			what := "spec.domain.cpu.dedicatedCpuPlacement"
			if d.CPU.IsolateEmulatorThread {
				what = "spec.domain.cpu.isolateEmulatorThread"
			}
			return nil, fmt.Errorf("launcher: %s: the VM needs %d dedicated CPUs (%d vCPUs%s), the launcher has %d (%v)",
				what, need, vcpus, map[bool]string{true: " + 1 emulator", false: ""}[d.CPU.IsolateEmulatorThread], len(cpus), cpus)
		}
		p.vcpuCPUs = cpus[:vcpus]
		p.emulator = cpus
		if d.CPU.IsolateEmulatorThread {
			p.emulator = cpus[vcpus:need]
		}
		if rt := d.CPU.Realtime; rt != nil {
			mask, err := validation.ParseRealtimeMask(rt.Mask, vcpus)
			if err != nil {
				return nil, fmt.Errorf("launcher: spec.domain.cpu.realtime.mask: %w", err)
			}
			p.realtime = mask
		}
		if n := d.CPU.NUMA; n != nil && n.GuestMappingPassthrough != nil {
			sysNode := l.cfg.SysNodeDir
			if sysNode == "" {
				sysNode = "/sys/devices/system/node"
			}
			nodes, err := hostNodeOf(sysNode)
			if err != nil {
				return nil, fmt.Errorf("launcher: spec.domain.cpu.numa.guestMappingPassthrough: host NUMA nodes: %w", err)
			}
			index := map[int]int{} // host node → guest node
			for v, c := range p.vcpuCPUs {
				h := nodes[c]
				g, ok := index[h]
				if !ok {
					g = len(p.numa)
					index[h] = g
					p.numa = append(p.numa, cmdline.NUMANode{HostNode: h})
				}
				p.numa[g].VCPUs = append(p.numa[g].VCPUs, v)
			}
		}
	}
	if hp := d.Memory.Hugepages; hp != nil {
		dir, err := l.hugepagesDir(hp.PageSize)
		if err != nil {
			return nil, err
		}
		p.hugepagesDir = dir
	}
	return p, nil
}

// hugepagesDir checks that Config.HugepagesDir is hugetlbfs of the VMI's
// page size and makes the VM's own directory in it.
func (l *Launcher) hugepagesDir(pageSize string) (string, error) {
	const path = "spec.domain.memory.hugepages"
	root := l.cfg.HugepagesDir
	if root == "" {
		return "", fmt.Errorf("launcher: %s: no hugetlbfs mount configured", path)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		return "", fmt.Errorf("launcher: %s: %s: %w", path, root, err)
	}
	size, err := resource.ParseQuantity(pageSize)
	if err != nil {
		return "", fmt.Errorf("launcher: %s.pageSize: %w", path, err)
	}
	if st.Type != unix.HUGETLBFS_MAGIC {
		return "", fmt.Errorf("launcher: %s: %s is not a hugetlbfs mount", path, root)
	}
	if st.Bsize != size.Value() {
		return "", fmt.Errorf("launcher: %s.pageSize: %s is a hugetlbfs of %d-byte pages, not %s", path, root, st.Bsize, pageSize)
	}
	dir, err := os.MkdirTemp(root, "kemu-")
	if err != nil {
		return "", fmt.Errorf("launcher: %s: %w", path, err)
	}
	return dir, nil
}

// grantHugepages gives QEMU's user the VM's hugetlbfs directory.
func (l *Launcher) grantHugepages(id unpriv.Identity) error {
	if l.place == nil || l.place.hugepagesDir == "" || os.Geteuid() != 0 {
		return nil
	}
	if err := os.Chown(l.place.hugepagesDir, id.UID, id.GID); err != nil {
		return fmt.Errorf("launcher: hugepages directory for QEMU: %w", err)
	}
	return nil
}

// removeHugepagesDir removes the VM's hugetlbfs directory (QEMU unlinks
// its memory file as soon as it has it open).
func (l *Launcher) removeHugepagesDir() {
	if l.place != nil && l.place.hugepagesDir != "" {
		if err := os.RemoveAll(l.place.hugepagesDir); err != nil {
			klog.ErrorS(err, "Removing the hugepages directory", "dir", l.place.hugepagesDir)
		}
	}
}

// pin applies the placement to QEMU's threads before the guest runs: each
// vCPU thread (query-cpus-fast) to its CPU, SCHED_FIFO priority 1 for the
// realtime vCPUs, every other thread to the emulator CPUs (threads QEMU
// starts later inherit the affinity of the thread starting them). Thread
// ids from QEMU are trusted only when they are QEMU's own threads.
func (l *Launcher) pin(ctx context.Context) error {
	p := l.place
	if p == nil || p.vcpuCPUs == nil {
		return nil
	}
	pid := int(l.qemuPID.Load())
	tasks, err := qemuThreads(pid)
	if err != nil {
		return fmt.Errorf("launcher: spec.domain.cpu.dedicatedCpuPlacement: %w", err)
	}
	cpus, err := l.mon.QueryCPUsFast(ctx)
	if err != nil {
		return fmt.Errorf("launcher: spec.domain.cpu.dedicatedCpuPlacement: query-cpus-fast: %w", err)
	}
	if len(cpus) != len(p.vcpuCPUs) {
		return fmt.Errorf("launcher: spec.domain.cpu.dedicatedCpuPlacement: QEMU has %d vCPUs, the VMI %d", len(cpus), len(p.vcpuCPUs))
	}
	vcpuThread := map[int]bool{}
	for _, c := range cpus {
		if c.CPUIndex < 0 || c.CPUIndex >= len(p.vcpuCPUs) || !tasks[c.ThreadID] || vcpuThread[c.ThreadID] {
			return fmt.Errorf("launcher: spec.domain.cpu.dedicatedCpuPlacement: QEMU reported vCPU %d on thread %d, not one of its own", c.CPUIndex, c.ThreadID)
		}
		vcpuThread[c.ThreadID] = true
	}
	// The emulator threads first: the vCPUs' own pinning is then final.
	for tid := range tasks {
		if vcpuThread[tid] {
			continue
		}
		if err := setAffinity(tid, p.emulator); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("launcher: spec.domain.cpu.dedicatedCpuPlacement: QEMU thread %d to CPUs %v: %w", tid, p.emulator, err)
		}
	}
	for _, c := range cpus {
		host := p.vcpuCPUs[c.CPUIndex]
		if err := setAffinity(c.ThreadID, []int{host}); err != nil {
			return fmt.Errorf("launcher: spec.domain.cpu.dedicatedCpuPlacement: vCPU %d (thread %d) to CPU %d: %w", c.CPUIndex, c.ThreadID, host, err)
		}
		if p.realtime != nil && p.realtime[c.CPUIndex] {
			attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 1}
			if err := unix.SchedSetAttr(c.ThreadID, &attr, 0); err != nil {
				return fmt.Errorf("launcher: spec.domain.cpu.realtime: this node does not let vCPU %d (thread %d) run SCHED_FIFO: %w", c.CPUIndex, c.ThreadID, err)
			}
		}
	}
	klog.InfoS("QEMU's threads pinned", "vcpuCPUs", p.vcpuCPUs, "emulatorCPUs", p.emulator, "realtime", p.realtime != nil, "vmi", klog.KObj(l.vmi))
	return nil
}

func setAffinity(tid int, cpus []int) error {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	return unix.SchedSetaffinity(tid, &set)
}

// qemuThreads are the thread ids of process pid (/proc/<pid>/task).
func qemuThreads(pid int) (map[int]bool, error) {
	if pid <= 0 {
		return nil, errors.New("QEMU is not running")
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil, fmt.Errorf("QEMU's threads: %w", err)
	}
	defer f.Close()
	names, err := f.Readdirnames(maxQEMUThreads + 1)
	if err != nil {
		return nil, fmt.Errorf("QEMU's threads: %w", err)
	}
	if len(names) > maxQEMUThreads {
		return nil, fmt.Errorf("QEMU has more than %d threads", maxQEMUThreads)
	}
	out := map[int]bool{}
	for _, n := range names {
		if tid, err := strconv.Atoi(n); err == nil {
			out[tid] = true
		}
	}
	return out, nil
}
