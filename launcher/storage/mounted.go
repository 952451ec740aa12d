package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	pathrs "github.com/cyphar/filepath-securejoin/pathrs-lite"
	"golang.org/x/sys/unix"

	"github.com/kemu-dev/kemu/api/launcherpod"
	"github.com/kemu-dev/kemu/launcher/images"
)

// An image mounted by the kubelet (a Kubernetes image volume: the launcher
// Pod's containerDisks and kernel-boot image when kemu-config
// imageVolumes is on) is read as its own root: the image's author chose its
// symlinks, so a path is resolved inside the mount, symlinks followed
// within it and never out of it (openat2's RESOLVE_IN_ROOT, through
// filepath-securejoin's pathrs-lite, as runc does), and what QEMU opens is
// the resolved path, with no symlink left. The mount is read-only and the
// image immutable, so the path stays what was checked.

// mountedFile resolves p (absolute or relative to the image's root) in the
// image mounted at root and returns its real path: a regular file.
func mountedFile(root, p string) (string, error) {
	h, err := pathrs.OpenInRoot(root, path.Clean("/"+p))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("no file %s in the image: %w", p, images.ErrNotFound)
		}
		return "", fmt.Errorf("%s in the image: %w", p, err)
	}
	defer h.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(h.Fd()), &st); err != nil {
		return "", fmt.Errorf("%s in the image: %w", p, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return "", fmt.Errorf("%s in the image is not a regular file: %w", p, images.ErrNotFound)
	}
	real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(h.Fd())))
	if err != nil {
		return "", fmt.Errorf("%s in the image: %w", p, err)
	}
	if rel, err := filepath.Rel(root, real); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("%s in the image resolved to %s, outside it", p, real)
	}
	return real, nil
}

// mountedDisk is a containerDisk's disk in its image mounted at root: p
// when set, else the one regular file (after its symlinks) directly in
// the image's /disk/ — what kemu-copy would have copied.
func mountedDisk(root, p string) (string, error) {
	if p != "" {
		return mountedFile(root, p)
	}
	dir, err := pathrs.OpenInRoot(root, launcherpod.DefaultDiskDir)
	if err != nil {
		return "", fmt.Errorf("no %s/ in the image: %w", launcherpod.DefaultDiskDir, images.ErrNotFound)
	}
	d, err := pathrs.Reopen(dir, unix.O_RDONLY|unix.O_DIRECTORY)
	dir.Close()
	if err != nil {
		return "", fmt.Errorf("%s/ in the image: %w", launcherpod.DefaultDiskDir, err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return "", fmt.Errorf("%s/ in the image: %w", launcherpod.DefaultDiskDir, err)
	}
	var files []string
	for _, n := range names {
		if strings.HasPrefix(n, ".") {
			continue
		}
		if f, err := mountedFile(root, path.Join(launcherpod.DefaultDiskDir, n)); err == nil {
			files = append(files, f)
		}
	}
	switch len(files) {
	case 1:
		return files[0], nil
	case 0:
		return "", fmt.Errorf("no disk in the image's %s/: %w", launcherpod.DefaultDiskDir, images.ErrNotFound)
	}
	return "", fmt.Errorf("the image's %s/ holds %d files: set path to choose one", launcherpod.DefaultDiskDir, len(files))
}
