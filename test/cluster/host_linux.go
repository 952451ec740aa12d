package cluster

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
)

// hostState records what the machine looked like before a cluster's nodes
// started, so that Stop (or the next node start, if this test process died)
// can put it back: the nodes' cgroup roots and bridge, the folders a node
// could still write outside its own (a safety net: a node's /var/lib,
// /var/log and /run are its own), and the sysctls the kubelet changes
// (not per network namespace). It is kept as JSON in the node lock file
// while the nodes run.
type hostState struct {
	Version int    `json:"version"`
	Owner   int    `json:"owner"`
	Dir     string `json:"dir"`
	// Entries of each tracked folder before the start; nil: it did not exist.
	Dirs map[string][]string `json:"dirs"`
	// NodeCgroups are the nodes' cgroup roots in every hierarchy.
	NodeCgroups []string `json:"nodeCgroups"`
	// Links are the network devices the cluster creates on the host: the
	// nodes' bridge and the host ends of their veths.
	Links   []string          `json:"links"`
	Sysctls map[string]string `json:"sysctls"`
	// HugePages2Mi is how many 2 MiB hugepages Start added to the host's
	// pool (Options.HugePages2Mi); cleanup takes them out again.
	HugePages2Mi int `json:"hugePages2Mi,omitempty"`
}

// hostStateVersion is hostState's format; a record of another format is
// not acted on.
const hostStateVersion = 2

// trackedDirs are written by the kubelet, containerd or CNI even with every
// configurable path under the cluster's folder. /run/netns is special: only
// new cni-* entries (the pods' network namespaces) are removed from it.
var trackedDirs = []string{
	"/run/netns", "/run/containerd", "/var/lib/cni", "/var/log/pods", "/var/log/containers",
	"/var/lib/kubelet", "/etc/cni", "/opt/cni", "/var/lib/containerd",
}

// trackedSysctls are set by the kubelet (setupKernelTunables) and by the CNI
// bridge plugin (ip_forward, isGateway).
var trackedSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes", "net/ipv4/ip_forward",
}

const kubepods = "kubepods"

func captureHost(dir string, nodes []string) *hostState {
	h := &hostState{Version: hostStateVersion, Owner: os.Getpid(), Dir: dir, Dirs: map[string][]string{}, Sysctls: map[string]string{}}
	for _, d := range trackedDirs {
		ents, err := os.ReadDir(d)
		if err != nil {
			h.Dirs[d] = nil
			continue
		}
		names := []string{}
		for _, e := range ents {
			names = append(names, e.Name())
		}
		h.Dirs[d] = names
	}
	// Only what does not exist yet is ours to remove (setupBridge and
	// LinkAdd refuse what exists).
	links := []string{nodesBridge}
	for i, n := range nodes {
		h.NodeCgroups = append(h.NodeCgroups, nodeCgroupDirs(n)...)
		links = append(links, hostVeth(i))
	}
	for _, l := range links {
		if _, err := netlink.LinkByName(l); err != nil {
			h.Links = append(h.Links, l)
		}
	}
	for _, s := range trackedSysctls {
		if b, err := os.ReadFile("/proc/sys/" + s); err == nil {
			h.Sysctls[s] = strings.TrimSpace(string(b))
		}
	}
	return h
}

// saveHostState writes h into the (locked) lock file; nil empties it.
func saveHostState(f *os.File, h *hostState) error {
	var b []byte
	if h != nil {
		var err error
		if b, err = json.Marshal(h); err != nil {
			return err
		}
	}
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.WriteAt(b, 0); err != nil {
		return err
	}
	return f.Sync()
}

// loadHostState reads the record a previous node left in the lock file
// (nil if it stopped cleanly).
func loadHostState(f *os.File) (*hostState, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(f)
	if err != nil || len(strings.TrimSpace(string(b))) == 0 {
		return nil, err
	}
	var h hostState
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("bad record %q: %w", b, err)
	}
	if h.Version != hostStateVersion {
		return nil, fmt.Errorf("the record %q is from another version of test/cluster: clean up what it names by hand and empty the file", b)
	}
	return &h, nil
}

// cleanupHost kills what is left of the nodes (processes in their cgroups,
// containerd shims and anything else naming the cluster's folder), unmounts
// what is mounted below the folder on the host, removes Pod network
// namespaces left in the host's /run/netns, the nodes' cgroups and bridge
// (with the host routes through it), files written outside the folder, and
// restores the sysctls. A node's own mounts and network devices go with its
// namespaces, when its last process dies. It is idempotent.
func cleanupHost(h *hostState) error {
	var errs []error
	if err := killCgroupProcs(h.NodeCgroups, 10*time.Second); err != nil {
		errs = append(errs, err)
	}
	if err := killMentioning(h.Dir+"/", 10*time.Second); err != nil {
		errs = append(errs, err)
	}
	if err := unmountUnder(h.Dir); err != nil {
		errs = append(errs, err)
	}
	// Network namespaces of pods (bind mounts of nsfs in /run/netns).
	before := h.Dirs["/run/netns"]
	if ents, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range ents {
			if !strings.HasPrefix(e.Name(), "cni-") || slices.Contains(before, e.Name()) {
				continue
			}
			p := filepath.Join("/run/netns", e.Name())
			if err := unmountUnder(p); err != nil {
				errs = append(errs, err)
			}
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	if err := removeCgroups(h.NodeCgroups, 10*time.Second); err != nil {
		errs = append(errs, err)
	}
	if err := deleteLinks(h.Links); err != nil {
		errs = append(errs, err)
	}
	for _, d := range trackedDirs {
		if d == "/run/netns" {
			continue
		}
		before, known := h.Dirs[d]
		if !known {
			continue
		}
		if before == nil {
			if err := unmountUnder(d); err != nil {
				errs = append(errs, err)
			}
			if err := os.RemoveAll(d); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if slices.Contains(before, e.Name()) {
				continue
			}
			p := filepath.Join(d, e.Name())
			if err := unmountUnder(p); err != nil {
				errs = append(errs, err)
			}
			if err := os.RemoveAll(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	// /run/netns itself, if the pods created it and it is empty now.
	if h.Dirs["/run/netns"] == nil {
		if _, known := h.Dirs["/run/netns"]; known {
			_ = os.Remove("/run/netns")
		}
	}
	if err := releaseHugepages(h); err != nil {
		errs = append(errs, err)
	}
	for s, v := range h.Sysctls {
		p := "/proc/sys/" + s
		if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) != v {
			if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
				errs = append(errs, fmt.Errorf("restoring sysctl %s=%s: %w", s, v, err))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("cluster: node cleanup: %w", errors.Join(errs...))
	}
	return nil
}

// cgroupMounts lists the mount points of cgroup v1 hierarchies and cgroup2.
func cgroupMounts() []string {
	var out []string
	for _, m := range mounts() {
		if m.fstype == "cgroup" || m.fstype == "cgroup2" {
			out = append(out, m.point)
		}
	}
	return out
}

// cgroupTree lists root and every cgroup below it, parents first.
func cgroupTree(root string) []string {
	var out []string
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// killCgroupProcs SIGKILLs every process in the given cgroups and their
// children until they are empty.
func killCgroupProcs(dirs []string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var pids []int
		for _, d := range dirs {
			for _, cg := range cgroupTree(d) {
				pids = append(pids, readPids(filepath.Join(cg, "cgroup.procs"))...)
			}
		}
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			if pid != os.Getpid() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v still in the nodes' cgroups after %s", pids, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func readPids(path string) []int {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// removeCgroups removes the given cgroups and their children, children
// first. A cgroup whose last process just died can stay busy for a moment,
// so it is retried.
func removeCgroups(dirs []string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var left []string
		var lastErr error
		for _, d := range dirs {
			tree := cgroupTree(d)
			for i := len(tree) - 1; i >= 0; i-- {
				if err := syscall.Rmdir(tree[i]); err != nil && !errors.Is(err, syscall.ENOENT) {
					left, lastErr = append(left, tree[i]), err
				}
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroups %v not removable: %w", left, lastErr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// killMentioning SIGKILLs every process (but this one) whose command line
// contains s, e.g. containerd shims whose -address is in the cluster folder,
// until none is left.
func killMentioning(s string, timeout time.Duration) error {
	if s == "" {
		return nil
	}
	deadline := time.Now().Add(timeout)
	for {
		pids := pidsMentioning(s)
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v naming %s survive SIGKILL", pids, s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func pidsMentioning(s string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(b), s) || !processAlive(pid) {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

type mountEntry struct{ point, fstype string }

// mounts parses /proc/self/mountinfo.
func mounts() []mountEntry {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []mountEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source super
		fields := strings.Fields(sc.Text())
		if len(fields) < 7 {
			continue
		}
		sep := slices.Index(fields, "-")
		if sep < 0 || sep+1 >= len(fields) {
			continue
		}
		out = append(out, mountEntry{point: unescapeMount(fields[4]), fstype: fields[sep+1]})
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space, ...).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// MountsUnder lists the mount points at or below dir, deepest first.
func MountsUnder(dir string) []string {
	dir = filepath.Clean(dir)
	var out []string
	for _, m := range mounts() {
		if m.point == dir || strings.HasPrefix(m.point, dir+"/") {
			out = append(out, m.point)
		}
	}
	slices.SortStableFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// unmountUnder unmounts everything at or below dir (lazily if busy), until
// nothing is mounted there.
func unmountUnder(dir string) error {
	if dir == "" || dir == "/" {
		return nil
	}
	for range 20 {
		ms := MountsUnder(dir)
		if len(ms) == 0 {
			return nil
		}
		for _, m := range ms {
			if err := syscall.Unmount(m, 0); err != nil {
				_ = syscall.Unmount(m, syscall.MNT_DETACH)
			}
		}
	}
	return fmt.Errorf("still mounted under %s: %v", dir, MountsUnder(dir))
}

// tryFlock takes an exclusive flock on f without blocking.
func tryFlock(f *os.File) (bool, error) {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false, nil
	}
	return false, err
}

// foreignKubelet reports a kubelet this package did not start: its pod
// cgroups exist although no node of ours left a record. Two kubelets would
// fight over the cgroups and /var/lib/kubelet/device-plugins.
func foreignKubelet() error {
	for _, m := range cgroupMounts() {
		for _, name := range []string{kubepods, "kubepods.slice"} {
			if _, err := os.Stat(filepath.Join(m, name)); err == nil {
				return fmt.Errorf("cluster: %s exists: another kubelet runs (or ran) on this machine; a test node needs the machine to itself",
					filepath.Join(m, name))
			}
		}
	}
	return nil
}

// Leftovers lists what the stopped cluster whose folder was dir left on the
// machine: processes naming the folder, mounts below it, the folder itself;
// and, unless another cluster with nodes holds the node lock (lockPath;
// "" for DefaultNodeLock) and owns them now, the nodes' bridge and veths
// and node cgroups. Empty means clean.
func Leftovers(dir, lockPath string) []string {
	var out []string
	if _, err := os.Stat(dir); err == nil {
		out = append(out, "folder "+dir)
	}
	for _, pid := range pidsMentioning(dir + "/") {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		out = append(out, fmt.Sprintf("process %d: %s", pid, strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " ")))
	}
	for _, m := range MountsUnder(dir) {
		out = append(out, "mount "+m)
	}
	if lockPath == "" {
		lockPath = DefaultNodeLock
	}
	if f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o644); err == nil {
		defer f.Close()
		if ok, _ := tryFlock(f); !ok {
			return out // another cluster's nodes run: the devices are theirs
		}
	}
	if links, err := netlink.LinkList(); err == nil {
		for _, l := range links {
			if name := l.Attrs().Name; name == nodesBridge || strings.HasPrefix(name, "kemu-n") {
				out = append(out, "network device "+name)
			}
		}
	}
	for _, m := range cgroupMounts() {
		cgs, _ := filepath.Glob(filepath.Join(m, NodeNamePrefix+"*"))
		for _, cg := range cgs {
			out = append(out, "cgroup "+cg)
		}
	}
	return out
}

// hugepages2MiPool is the host's pool of 2 MiB hugepages (whatever the
// default hugepage size: /proc/sys/vm/nr_hugepages is the default size's); a
// variable for the unit test.
var hugepages2MiPool = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"

func readPool() (int, error) {
	b, err := os.ReadFile(hugepages2MiPool)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// reserveHugepages adds n pages to the host's 2 MiB pool, on the record
// (h, saved in the lock file) before and after: first n, then what the
// kernel really added, so that a test process dying at any point leaves
// no more than it added to give back. The change is relative (not a value
// to restore), so others adding to and taking from the pool meanwhile (the
// launcher's hugepages test) keep theirs. Fewer pages than asked is an
// error (memory short or fragmented); cleanup gives back what was added.
func reserveHugepages(lock *os.File, h *hostState, n int) error {
	before, err := readPool()
	if err != nil {
		return fmt.Errorf("cluster: 2 MiB hugepages: %w", err)
	}
	h.HugePages2Mi = n
	if err := saveHostState(lock, h); err != nil {
		return fmt.Errorf("cluster: node lock: %w", err)
	}
	werr := os.WriteFile(hugepages2MiPool, []byte(strconv.Itoa(before+n)), 0o644)
	after, err := readPool()
	if err != nil {
		return fmt.Errorf("cluster: 2 MiB hugepages: %w", err)
	}
	h.HugePages2Mi = max(after-before, 0)
	if err := saveHostState(lock, h); err != nil {
		return fmt.Errorf("cluster: node lock: %w", err)
	}
	if werr != nil || after < before+n {
		return fmt.Errorf("cluster: adding %d 2 MiB hugepages to the host's %d: the pool has %d (%v)", n, before, after, werr)
	}
	return nil
}

// releaseHugepages takes the pages Start added out of the host's pool
// (pages still in use leave it as they are freed) and clears the record.
func releaseHugepages(h *hostState) error {
	if h.HugePages2Mi <= 0 {
		return nil
	}
	cur, err := readPool()
	if err != nil {
		return fmt.Errorf("2 MiB hugepages: %w", err)
	}
	if err := os.WriteFile(hugepages2MiPool, []byte(strconv.Itoa(max(cur-h.HugePages2Mi, 0))), 0o644); err != nil {
		return fmt.Errorf("giving back %d 2 MiB hugepages: %w", h.HugePages2Mi, err)
	}
	h.HugePages2Mi = 0
	return nil
}
