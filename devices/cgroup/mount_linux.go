package cgroup

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// MountIfMissing mounts the cgroup2 hierarchy at dir when the calling process
// sees none (Self fails with ErrNoCgroup2) and reports whether it did.
//
// A container that is not privileged often has no cgroup2 mount at all (a
// hybrid cgroup v1 host: runc bind-mounts only the v1 controllers, read-only)
// or only a read-only one; with CAP_SYS_ADMIN it can mount the hierarchy in
// its own mount namespace and find its group there. Call it only in a
// private mount namespace (a container): on a host the mount would be
// visible to everyone.
func MountIfMissing(dir string) (bool, error) {
	if _, err := Self(); err == nil || !errors.Is(err, ErrNoCgroup2) {
		return false, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	if err := unix.Mount("cgroup2", dir, "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return false, fmt.Errorf("%w; mounting cgroup2 at %s: %v", ErrNoCgroup2, dir, err)
	}
	return true, nil
}
