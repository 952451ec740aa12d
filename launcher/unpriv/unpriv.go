// Package unpriv runs QEMU unprivileged: as its own non-root user (KubeVirt's
// qemu, 107:107), with an empty capability set (effective, permitted,
// inheritable, ambient and bounding), no_new_privs and the VM's SELinux
// label — whatever the launcher itself runs as.
//
// Go cannot drop the bounding set or set no_new_privs between fork and exec,
// so Command starts this very binary (/proc/self/exe) in a mode that an init
// function of this package recognises: on one locked OS thread it drops
// everything, changes user, re-arms the parent-death signal (a credential
// change clears it) and execs QEMU, which keeps the pid, the cgroup and the
// file descriptors the launcher gave it. Any program that starts QEMU through
// Command must therefore import this package (the launcher does).
package unpriv

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
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

// Spec is what the exec helper does before it execs the program.
type Spec struct {
	Identity
	// Umask for the program (QEMU's sockets in the runtime directory).
	Umask int
	// SELinuxLabel is the program's process label ("": unchanged).
	SELinuxLabel string
	// ParentPID is the launcher: if it is gone by the time the helper has
	// re-armed the parent-death signal, the helper exits.
	ParentPID int
}

// helperEnv carries the Spec to the helper; it is removed from the
// environment QEMU gets.
const helperEnv = "KEMU_UNPRIV_EXEC"

// Command returns a command that runs path with args under spec. The caller
// sets SysProcAttr (Setpgid, Pdeathsig, cgroup), files and output as for any
// exec.Cmd; cmd.Path is this binary, cmd.Args[0] the program.
func Command(spec Spec, path string, args ...string) (*exec.Cmd, error) {
	path, err := exec.LookPath(path)
	if err != nil {
		return nil, fmt.Errorf("unpriv: %w", err)
	}
	if spec.ParentPID == 0 {
		spec.ParentPID = os.Getpid()
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	// /proc/self/exe: this binary even if its file was replaced since.
	cmd := exec.Command("/proc/self/exe", args...)
	cmd.Args[0] = path // the helper execs its argv[0]
	cmd.Env = append(withoutHelperEnv(os.Environ()), helperEnv+"="+string(b))
	return cmd, nil
}

func withoutHelperEnv(env []string) []string {
	out := env[:0:0]
	for _, e := range env {
		if !strings.HasPrefix(e, helperEnv+"=") {
			out = append(out, e)
		}
	}
	return out
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
