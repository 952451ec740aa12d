package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/containerd/cgroups/v3/cgroup2"
	"github.com/containerd/cgroups/v3/cgroup2/stats"
	"golang.org/x/sys/unix"
)

// RemoveTimeout is how long Remove waits for the cgroup to become empty.
var RemoveTimeout = 10 * time.Second

// Group is a child cgroup confined to a device allowlist.
//
// The cgroup itself (processes, statistics, kill, removal) is handled with
// containerd's cgroups/v3 cgroup2 manager; the device program is kemu's own
// (program.go), because cgroups/v3 stacks a new program on every update and
// grants a request when any one of its access bits matches (docs/decisions.md).
type Group struct {
	mu      sync.Mutex
	path    string
	m       *cgroup2.Manager
	dir     *os.File // O_RDONLY|O_DIRECTORY: BPF attach target and CLONE_INTO_CGROUP fd
	allow   Allowlist
	removed bool
}

// Create makes the cgroup <parent>/<name> with a device program that allows
// exactly allow. parent is a cgroup2 directory; "" means the calling process's own
// cgroup (Self). No process is moved: start one into it with FD (CLONE_INTO_CGROUP).
// The directory must not exist yet.
func Create(parent, name string, allow Allowlist) (*Group, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return nil, fmt.Errorf("invalid cgroup name %q", name)
	}
	insts, err := program(allow)
	if err != nil {
		return nil, err
	}
	if parent == "" {
		h, err := Self()
		if err != nil {
			return nil, err
		}
		parent = h.Dir
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(parent, &fs); err != nil {
		return nil, fmt.Errorf("cgroup parent: %w", err)
	}
	if fs.Type != unix.CGROUP2_SUPER_MAGIC {
		return nil, fmt.Errorf("%w: %s is not on a cgroup2 filesystem", ErrNoCgroup2, parent)
	}
	p := filepath.Join(parent, name)
	m, err := manager(p)
	if err != nil {
		return nil, err
	}
	// Mkdir, not the manager's MkdirAll: the group must be new.
	if err := os.Mkdir(p, 0o755); err != nil {
		return nil, fmt.Errorf("creating cgroup: %w", err)
	}
	dir, err := os.OpenFile(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = unix.Rmdir(p)
		return nil, fmt.Errorf("opening cgroup: %w", err)
	}
	g := &Group{path: p, m: m, dir: dir}
	if err := g.attach(insts); err != nil {
		dir.Close()
		_ = unix.Rmdir(p)
		return nil, err
	}
	g.allow = append(Allowlist(nil), allow...)
	return g, nil
}

// Path is the cgroup's directory.
func (g *Group) Path() string { return g.path }

// Allowlist is the list currently in force.
func (g *Group) Allowlist() Allowlist {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append(Allowlist(nil), g.allow...)
}

// FD is a directory fd of the cgroup for syscall.SysProcAttr{UseCgroupFD: true,
// CgroupFD: fd}: the child is created inside the cgroup (clone3 CLONE_INTO_CGROUP)
// and never runs outside it. It stays valid until Remove.
func (g *Group) FD() (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.removed {
		return -1, fmt.Errorf("cgroup %s was removed", g.path)
	}
	return int(g.dir.Fd()), nil
}

// Update replaces the allowlist: afterwards exactly allow is in force.
//
// Device programs attached with BPF_F_ALLOW_MULTI stack (a request must pass all
// of them), so Update attaches the new program first and then detaches every
// other device program attached directly to this cgroup (found with
// BPF_PROG_QUERY). While both are attached the intersection applies, so the
// cgroup never holds more than either the old or the new list.
func (g *Group) Update(allow Allowlist) error {
	insts, err := program(allow)
	if err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.removed {
		return fmt.Errorf("cgroup %s was removed", g.path)
	}
	if err := g.attach(insts); err != nil {
		return err
	}
	g.allow = append(Allowlist(nil), allow...)
	return nil
}

// attach loads insts, attaches it and detaches all other device programs of the cgroup.
func (g *Group) attach(insts asm.Instructions) error {
	prog, err := ebpf.NewProgramWithOptions(&ebpf.ProgramSpec{
		Name:         "kemu_devices",
		Type:         ebpf.CGroupDevice,
		Instructions: insts,
		License:      "Apache-2.0",
	}, ebpf.ProgramOptions{})
	if err != nil {
		return fmt.Errorf("loading device program: %w", err)
	}
	// The kernel keeps an attached program alive; our fd is not needed afterwards.
	defer prog.Close()
	info, err := prog.Info()
	if err != nil {
		return fmt.Errorf("device program info: %w", err)
	}
	newID, ok := info.ID()
	if !ok {
		return errors.New("device program: kernel does not report program IDs")
	}
	target := int(g.dir.Fd())
	if err := link.RawAttachProgram(link.RawAttachProgramOptions{
		Target:  target,
		Program: prog,
		Attach:  ebpf.AttachCGroupDevice,
		Flags:   unix.BPF_F_ALLOW_MULTI,
	}); err != nil {
		return fmt.Errorf("attaching device program to %s: %w", g.path, err)
	}
	q, err := link.QueryPrograms(link.QueryOptions{Target: target, Attach: ebpf.AttachCGroupDevice})
	if err != nil {
		return fmt.Errorf("querying device programs of %s: %w", g.path, err)
	}
	var errs []error
	for _, ap := range q.Programs {
		if ap.ID == newID {
			continue
		}
		if err := detach(target, ap.ID); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("cgroup %s: new device program attached, but the old ones stay (intersection applies): %w", g.path, errors.Join(errs...))
	}
	return nil
}

func detach(target int, id ebpf.ProgramID) error {
	old, err := ebpf.NewProgramFromID(id)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("device program %d: %w", id, err)
	}
	defer old.Close()
	err = link.RawDetachProgram(link.RawDetachProgramOptions{Target: target, Program: old, Attach: ebpf.AttachCGroupDevice})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("detaching device program %d: %w", id, err)
	}
	return nil
}

// Remove waits until the cgroup has no processes (it kills nothing) for up to
// RemoveTimeout and removes it. Removing a removed group is a no-op.
func (g *Group) Remove() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.removed {
		return nil
	}
	deadline := time.Now().Add(RemoveTimeout)
	wait := time.Millisecond
	for {
		procs, err := g.m.Procs(true)
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if err != nil {
			return fmt.Errorf("removing cgroup %s: %w", g.path, err)
		}
		if len(procs) == 0 {
			// The manager checks for tasks again and removes the directory.
			// The kernel may still refuse for a moment after the last task
			// left cgroup.procs (its exit not finished: EBUSY); the manager
			// retries for ~150 ms, this loop until the deadline.
			err := g.m.Delete()
			if err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("removing cgroup %s: %w", g.path, err)
			}
		} else if time.Now().After(deadline) {
			return fmt.Errorf("removing cgroup %s: still has processes %v after %s", g.path, procs, RemoveTimeout)
		}
		time.Sleep(wait)
		wait = min(2*wait, 100*time.Millisecond)
	}
	g.removed = true
	return g.dir.Close()
}

// Procs lists the processes in the cgroup (and its children).
func (g *Group) Procs() ([]int, error) {
	ids, err := g.m.Procs(true)
	if err != nil {
		return nil, fmt.Errorf("processes of cgroup %s: %w", g.path, err)
	}
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	return out, nil
}

// Kill sends SIGKILL to every process in the cgroup (cgroup.kill), so that
// nothing QEMU may have spawned outlives it.
func (g *Group) Kill() error {
	if err := g.m.Kill(); err != nil {
		return fmt.Errorf("killing cgroup %s: %w", g.path, err)
	}
	return nil
}

// Stats reads the cgroup's CPU, memory, pids and I/O figures (those of the
// controllers enabled for it; on a hybrid host often only CPU usage).
func (g *Group) Stats() (*stats.Metrics, error) {
	m, err := g.m.StatFiltered(cgroup2.StatCPU | cgroup2.StatMemory | cgroup2.StatPids | cgroup2.StatIO)
	if err != nil {
		return nil, fmt.Errorf("statistics of cgroup %s: %w", g.path, err)
	}
	return m, nil
}

// manager returns a cgroups/v3 manager for the cgroup directory dir on the
// cgroup2 hierarchy that contains it.
func manager(dir string) (*cgroup2.Manager, error) {
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer mi.Close()
	mounts, err := ParseMountinfo(mi)
	if err != nil {
		return nil, err
	}
	best := ""
	for _, m := range mounts {
		if rel, ok := within(m.Mountpoint, dir); ok && rel != "/" && len(m.Mountpoint) > len(best) {
			best = m.Mountpoint
		}
	}
	if best == "" {
		return nil, fmt.Errorf("%w: %s is below no cgroup2 mount point", ErrNoCgroup2, dir)
	}
	rel, _ := within(best, dir)
	m, err := cgroup2.Load(rel, cgroup2.WithMountpoint(best))
	if err != nil {
		return nil, fmt.Errorf("cgroup %s: %w", dir, err)
	}
	return m, nil
}

// programs lists the IDs of the device programs attached to the cgroup.
func (g *Group) programs() ([]ebpf.ProgramID, error) {
	q, err := link.QueryPrograms(link.QueryOptions{Target: int(g.dir.Fd()), Attach: ebpf.AttachCGroupDevice})
	if err != nil {
		return nil, err
	}
	ids := make([]ebpf.ProgramID, len(q.Programs))
	for i, p := range q.Programs {
		ids[i] = p.ID
	}
	return ids, nil
}
