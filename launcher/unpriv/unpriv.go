// Package unpriv runs QEMU unprivileged: as its own non-root user (KubeVirt's
// qemu, 107:107), with an empty capability set (effective, permitted,
// inheritable, ambient and bounding), no_new_privs and the VM's SELinux
// label — whatever the launcher itself runs as.
//
// Go cannot drop the bounding set or set no_new_privs between fork and exec,
// but the kernel keeps both, with the inheritable and ambient sets, the
// SELinux exec label and the umask (after unshare(CLONE_FS)), per thread and
// hands them to a child at fork. So Start forks from an OS thread of its
// own that it prepares first: locked to its goroutine and never unlocked
// (the Go runtime never runs other goroutines on it or clones new threads
// from it), and parked once QEMU has exited rather than ended, since ending
// a thread kills every child forked from it with Pdeathsig. The child
// changes user (SysProcAttr.Credential), re-arms the parent-death signal
// after that (Go does both in that order) and execs QEMU: with no
// inheritable, ambient or bounding capabilities a non-root program gets none
// at exec, whatever securebits say.
//
// Spec.UserNS runs a program (virtiofsd) as root of a user namespace of
// its own instead, mapped to the same unprivileged user outside: the
// capabilities it gets there let it chroot and unshare its own sandbox but
// give it nothing on the node, where it is that user with no_new_privs,
// the SELinux label and no supplementary group.
package unpriv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"

	goselinux "github.com/opencontainers/selinux/go-selinux"
	"golang.org/x/sys/unix"
)

// QEMU's identity when the launcher runs as root (KubeVirt's qemu user and
// group; its images and docs use 107:107 for disk images too).
const (
	UID = 107
	GID = 107
)

// Identity is who QEMU runs as.
type Identity struct {
	UID, GID int
	// Groups are QEMU's supplementary groups (e.g. /dev/kvm's group).
	Groups []int
}

// ForQEMU is QEMU's identity for a launcher running with uid euid: 107:107
// for root, else the launcher's own user (who cannot change it).
func ForQEMU(euid int) Identity {
	if euid == 0 {
		return Identity{UID: UID, GID: GID}
	}
	return Identity{UID: euid, GID: os.Getegid()}
}

// Spec is how Start runs the program.
type Spec struct {
	Identity
	// Umask for the program (QEMU's sockets in the runtime directory).
	Umask int
	// SELinuxLabel is the program's process label ("": unchanged).
	SELinuxLabel string
	// UserNS starts the program in a user namespace of its own, in which
	// it is root (uid and gid 0) mapped to Identity's UID and GID outside
	// (one id each, setgroups denied; Identity.Groups must be empty and
	// the program has no supplementary group): to the node it is that
	// user and nothing more, whatever capabilities it holds inside —
	// those reach only what the namespace owns (namespaces it creates,
	// files of the one mapped user). For programs that need to chroot or
	// unshare to sandbox themselves (virtiofsd), which QEMU does not.
	// The launcher needs CAP_SYS_ADMIN (or unprivileged user namespaces)
	// to create it.
	UserNS bool
	// NetNS, when set, is the network namespace (a path such as
	// /proc/<pid>/ns/net or /run/netns/<name>) the program starts in: the
	// preparing thread joins it (it needs CAP_SYS_ADMIN). "": the
	// launcher's own. For passt serving a pod network the launcher does
	// not live in (tests; in a launcher Pod it is the launcher's own).
	NetNS string
}

// UserNSMappings are the uid and gid maps of a Spec.UserNS program run as
// id: its root is id outside, one id each.
func UserNSMappings(id Identity) (uids, gids []syscall.SysProcIDMap) {
	return []syscall.SysProcIDMap{{ContainerID: 0, HostID: id.UID, Size: 1}},
		[]syscall.SysProcIDMap{{ContainerID: 0, HostID: id.GID, Size: 1}}
}

// Start starts cmd under spec from an OS thread of its own, which reaps it
// (exited receives cmd.Wait's error) and is then parked for good.
// The caller sets SysProcAttr (Setpgid, Pdeathsig — which fires when that
// thread, not the caller's, dies — cgroup), files, directory and output as
// for any exec.Cmd, but not Credential nor user namespace mappings: Start
// sets them. The calling thread and process are not changed.
func Start(cmd *exec.Cmd, spec Spec) (exited <-chan error, err error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	a := cmd.SysProcAttr
	if a.Credential != nil {
		return nil, errors.New("unpriv: the command already has a Credential")
	}
	if a.UidMappings != nil || a.GidMappings != nil || (a.Cloneflags|a.Unshareflags)&syscall.CLONE_NEWUSER != 0 {
		return nil, errors.New("unpriv: the command already has a user namespace (Spec.UserNS makes it)")
	}
	root := unix.Geteuid() == 0
	switch {
	case spec.UserNS && len(spec.Groups) > 0:
		return nil, errors.New("unpriv: a program in its own user namespace has no supplementary groups (Spec.Groups)")
	case spec.UserNS:
		// Root inside: the child sets uid and gid 0 of the new namespace
		// once the parent wrote the maps, which makes it id outside (until
		// then it is the launcher's ids, unmapped). Its supplementary
		// groups are the preparing thread's: none (prepareThread).
		a.Cloneflags |= syscall.CLONE_NEWUSER
		a.UidMappings, a.GidMappings = UserNSMappings(spec.Identity)
		a.GidMappingsEnableSetgroups = false
		a.Credential = &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true}
	case root:
		groups := make([]uint32, 0, len(spec.Groups)+1)
		for _, g := range spec.Groups {
			groups = append(groups, uint32(g))
		}
		if len(groups) == 0 {
			groups = append(groups, uint32(spec.GID))
		}
		a.Credential = &syscall.Credential{Uid: uint32(spec.UID), Gid: uint32(spec.GID), Groups: groups}
	}
	started := make(chan error, 1)
	done := make(chan error, 1)
	run := func() {
		// Parked at the end, not ended: the runtime would end a locked
		// thread with its goroutine, and with it every child that an
		// unlocked goroutine forked from this thread before with
		// Pdeathsig (see netsetup/nsthread). Nothing else runs on it.
		defer func() { <-parked }()
		if err := prepareThread(spec, root); err != nil {
			started <- err
			return
		}
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		done <- cmd.Wait()
	}
	go func() {
		// Never unlocked once prepared: the thread's bounding set,
		// no_new_privs and filesystem attributes are the child's, not the
		// launcher's, and cannot all be undone. Not the main thread
		// either, whose status is the process's in /proc/<pid>/status:
		// there, hand over to a goroutine that cannot be scheduled on it
		// while this one holds it.
		runtime.LockOSThread()
		if unix.Gettid() != unix.Getpid() {
			run()
			return
		}
		moved := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(moved)
			run()
		}()
		<-moved
		runtime.UnlockOSThread()
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("unpriv: %w", err)
	}
	return done, nil
}

// parked is never closed: each thread Start prepared waits on it for good
// once its program has been reaped (one idle OS thread per program started).
var parked = make(chan struct{})

// prepareThread gives the calling (locked, throw-away) thread what the
// program must start with. Every call is a per-thread system call.
func prepareThread(spec Spec, root bool) error {
	// Its own umask, not the launcher's.
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("unshare(CLONE_FS): %w", err)
	}
	unix.Umask(spec.Umask)
	if spec.UserNS && root {
		// The child of a new user namespace keeps its parent's
		// supplementary groups and, with setgroups denied there, cannot
		// drop them: drop root's here, on this thread only (the raw
		// system call; the libc and Go wrappers change every thread).
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
			return fmt.Errorf("dropping the supplementary groups: %w", e)
		}
	}
	if root {
		// Dropping from the bounding set needs SETPCAP, which this thread
		// keeps (the child loses it when it changes user). A Spec.UserNS
		// child starts its namespace with every capability, bounding set
		// included, but they are the namespace's, not the node's.
		for c := 0; c <= lastCap(); c++ {
			if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
				return fmt.Errorf("dropping capability %d from the bounding set: %w", c, err)
			}
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && err != unix.EINVAL {
		return fmt.Errorf("clearing ambient capabilities: %w", err)
	}
	// No inheritable capabilities; effective and permitted stay for the
	// child's setgroups/setresgid/setresuid.
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("reading capabilities: %w", err)
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("clearing inheritable capabilities: %w", err)
	}
	if spec.NetNS != "" {
		fd, err := unix.Open(spec.NetNS, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("network namespace %s: %w", spec.NetNS, err)
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("joining the network namespace %s: %w", spec.NetNS, err)
		}
	}
	if spec.SELinuxLabel != "" {
		if err := goselinux.SetExecLabel(spec.SELinuxLabel); err != nil {
			return fmt.Errorf("SELinux exec label %q: %w", spec.SELinuxLabel, err)
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	return nil
}

// Status is a process's identity and capability sets as /proc/<pid>/status
// shows them.
type Status struct {
	UIDs, GIDs                             [4]int // real, effective, saved, fs
	CapInh, CapPrm, CapEff, CapBnd, CapAmb uint64
	NoNewPrivs                             bool
	Seccomp                                int
}

// ReadStatus parses /proc/<pid>/status.
func ReadStatus(pid int) (Status, error) {
	return ReadStatusFile(fmt.Sprintf("/proc/%d/status", pid))
}

// ReadStatusFile parses a copy of a /proc/<pid>/status.
func ReadStatusFile(path string) (Status, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Status{}, err
	}
	var s Status
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch k {
		case "Uid":
			_, err = fmt.Sscan(v, &s.UIDs[0], &s.UIDs[1], &s.UIDs[2], &s.UIDs[3])
		case "Gid":
			_, err = fmt.Sscan(v, &s.GIDs[0], &s.GIDs[1], &s.GIDs[2], &s.GIDs[3])
		case "CapInh":
			_, err = fmt.Sscanf(v, "%x", &s.CapInh)
		case "CapPrm":
			_, err = fmt.Sscanf(v, "%x", &s.CapPrm)
		case "CapEff":
			_, err = fmt.Sscanf(v, "%x", &s.CapEff)
		case "CapBnd":
			_, err = fmt.Sscanf(v, "%x", &s.CapBnd)
		case "CapAmb":
			_, err = fmt.Sscanf(v, "%x", &s.CapAmb)
		case "NoNewPrivs":
			s.NoNewPrivs = v == "1"
		case "Seccomp":
			_, err = fmt.Sscan(v, &s.Seccomp)
		}
		if err != nil {
			return Status{}, fmt.Errorf("unpriv: %s %s: %w", path, k, err)
		}
	}
	return s, nil
}

// Unprivileged says what keeps s from being an unprivileged process of
// identity id (nil: nothing).
func (s Status) Unprivileged(id Identity) error {
	var bad []string
	for i, u := range s.UIDs {
		if u != id.UID {
			bad = append(bad, fmt.Sprintf("uid[%d]=%d", i, u))
		}
	}
	for i, g := range s.GIDs {
		if g != id.GID {
			bad = append(bad, fmt.Sprintf("gid[%d]=%d", i, g))
		}
	}
	for name, c := range map[string]uint64{"CapInh": s.CapInh, "CapPrm": s.CapPrm, "CapEff": s.CapEff, "CapAmb": s.CapAmb} {
		if c != 0 {
			bad = append(bad, fmt.Sprintf("%s=%016x", name, c))
		}
	}
	if id.UID != 0 && os.Geteuid() == 0 && s.CapBnd != 0 {
		bad = append(bad, fmt.Sprintf("CapBnd=%016x", s.CapBnd))
	}
	if !s.NoNewPrivs {
		bad = append(bad, "NoNewPrivs=0")
	}
	if len(bad) > 0 {
		return fmt.Errorf("not unprivileged: %s", strings.Join(bad, " "))
	}
	return nil
}

// lastCap is the highest capability the kernel knows.
func lastCap() int {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 63
	}
	var n int
	if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &n); err != nil {
		return 63
	}
	return n
}
