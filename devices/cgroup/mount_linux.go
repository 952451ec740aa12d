package cgroup

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// MountOwn mounts, at dir, the cgroup2 hierarchy as seen from a new cgroup
// namespace rooted at the calling process's own cgroup — its container's —
// when the process has no writable cgroup2 mount, and reports whether it did.
// The mount shows that cgroup and its descendants only: no other Pod's
// cgroup and no host-level control file.
//
// A container that is not privileged has no cgroup2 mount at all (a hybrid
// cgroup v1 host: runc bind-mounts only the v1 controllers, read-only) or a
// read-only one (a cgroup v2 host); with CAP_SYS_ADMIN it can mount the
// hierarchy in its own mount namespace. Call it only in a private mount
// namespace (a container): on a host the mount would be visible to everyone.
//
// The namespace is entered by one OS thread only, which mounts and is then
// discarded: the rest of the process keeps its cgroup namespace, so
// /proc/self/cgroup and the mount's root (as mountinfo shows it) stay
// comparable and Self finds its group at the top of dir.
func MountOwn(dir string) (bool, error) {
	h, err := Self()
	switch {
	case err == nil && !h.ReadOnly:
		return false, nil
	case err != nil && !errors.Is(err, ErrNoCgroup2):
		return false, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends in its own cgroup namespace and
		// the runtime discards it when this goroutine returns.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
			errc <- fmt.Errorf("a cgroup namespace of its own: %w", err)
			return
		}
		errc <- unix.Mount("cgroup2", dir, "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	}()
	if err := <-errc; err != nil {
		return false, fmt.Errorf("%w; mounting cgroup2 at %s: %v", ErrNoCgroup2, dir, err)
	}
	return true, nil
}
