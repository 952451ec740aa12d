package unpriv

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"unsafe"

	goselinux "github.com/opencontainers/selinux/go-selinux"
	"golang.org/x/sys/unix"
)

// init turns this process into the exec helper when Command started it.
func init() {
	raw, ok := os.LookupEnv(helperEnv)
	if !ok {
		return
	}
	// Everything below changes this thread's credentials and ends in
	// execve, which makes this thread the whole process.
	runtime.LockOSThread()
	var spec Spec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		fail("bad spec: %v", err)
	}
	if err := os.Unsetenv(helperEnv); err != nil {
		fail("%v", err)
	}
	if err := dropAndExec(spec, os.Args[0], os.Args, os.Environ()); err != nil {
		fail("%v", err)
	}
}

// fail reports on stderr (the launcher keeps QEMU's stderr) and exits 127,
// as a shell does for a command it cannot run.
func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kemu unpriv: "+format+"\n", args...)
	os.Exit(127)
}

// dropAndExec runs on a locked thread: the credential calls are raw
// per-thread system calls (not Go's all-threads wrappers), which is right
// because execve discards every other thread.
func dropAndExec(spec Spec, path string, argv, env []string) error {
	root := unix.Geteuid() == 0
	// The bounding set first: dropping needs CAP_SETPCAP, which setresuid
	// to a non-root user takes away.
	if root {
		for c := 0; c <= lastCap(); c++ {
			if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
				return fmt.Errorf("dropping capability %d from the bounding set: %w", c, err)
			}
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && err != unix.EINVAL {
		return fmt.Errorf("clearing ambient capabilities: %w", err)
	}
	if spec.SELinuxLabel != "" {
		if err := goselinux.SetExecLabel(spec.SELinuxLabel); err != nil {
			return fmt.Errorf("SELinux exec label %q: %w", spec.SELinuxLabel, err)
		}
	}
	if root {
		groups := make([]uint32, 0, len(spec.Groups)+1)
		for _, g := range spec.Groups {
			groups = append(groups, uint32(g))
		}
		if len(groups) == 0 {
			groups = append(groups, uint32(spec.GID)) // setgroups(0, NULL) is fine too; this is explicit
		}
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETGROUPS, uintptr(len(groups)), uintptr(unsafe.Pointer(&groups[0])), 0); e != 0 {
			return fmt.Errorf("setgroups %v: %w", spec.Groups, e)
		}
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESGID, uintptr(spec.GID), uintptr(spec.GID), uintptr(spec.GID)); e != 0 {
			return fmt.Errorf("setresgid %d: %w", spec.GID, e)
		}
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, uintptr(spec.UID), uintptr(spec.UID), uintptr(spec.UID)); e != 0 {
			return fmt.Errorf("setresuid %d: %w", spec.UID, e)
		}
	}
	// Effective, permitted and inheritable: empty (setresuid cleared the
	// first two for a non-root user; inheritable survives it).
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("clearing capabilities: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	// A change of credentials clears the parent-death signal: arm it again,
	// then make sure the launcher did not die in between.
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("parent-death signal: %w", err)
	}
	if spec.ParentPID != 0 && unix.Getppid() != spec.ParentPID {
		return fmt.Errorf("the launcher (pid %d) is gone", spec.ParentPID)
	}
	unix.Umask(spec.Umask)
	if err := syscall.Exec(path, argv, env); err != nil {
		return fmt.Errorf("exec %s: %w", path, err)
	}
	return nil
}
