package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kemu-dev/kemu/api/v1alpha1"
)

// Share is a volume shared with the guest as a directory
// (domain.devices.filesystems): virtiofsd serves Dir, read-only or not.
// Nothing is created for it, and Cleanup never touches it.
type Share struct {
	Name string
	Kind string // KindPersistentVolumeClaim, KindConfigMap, ...
	// Dir is the shared directory: a file-system claim's mount
	// <PVCRoot>/<claimName> (not its disk.img), a config volume's
	// <ConfigDir>/<volume> (with the kubelet's ..data symlinks: an update
	// swaps them, and the guest sees it), a containerPath's mount.
	Dir string
	// ReadOnly: the guest must not write it (config kinds, readOnly
	// claims). Dir is then on a read-only mount: the launcher Pod mounts
	// it so; a writable one is refused (C virtiofsd 7.2 has no read-only
	// mode of its own).
	ReadOnly bool
	// Field is the VMI field the share comes from, for errors.
	Field string
}

// share resolves a volume that a filesystem shares to its directory.
func (pr *preparer) share(v *v1alpha1.Volume, field string) (Share, error) {
	kind, readOnly := v1alpha1.FilesystemSource(v)
	sh := Share{Name: v.Name, Kind: kind, ReadOnly: readOnly}
	switch {
	case v.PersistentVolumeClaim != nil:
		sh.Field = field + ".persistentVolumeClaim.claimName"
		claim := v.PersistentVolumeClaim.ClaimName
		if err := checkName(claim); err != nil {
			return Share{}, fieldErr(sh.Field, "invalid claim name %q", claim)
		}
		if pr.opts.PVCRoot == "" {
			return Share{}, fieldErr(sh.Field, "claim %q: no claim directory configured", claim)
		}
		sh.Dir = filepath.Join(pr.opts.PVCRoot, claim)
		st, err := os.Stat(sh.Dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return Share{}, fieldErr(sh.Field, "claim %q not found: no directory %s", claim, sh.Dir)
		case err != nil:
			return Share{}, fieldErr(sh.Field, "claim %q: %w", claim, err)
		case st.Mode()&fs.ModeDevice != 0:
			return Share{}, fieldErr(sh.Field, "claim %q is a block device (volumeMode Block): a filesystem shares a file system's directory; use a volumeMode Filesystem claim, or the claim as a disk", claim)
		case !st.IsDir():
			return Share{}, fieldErr(sh.Field, "claim %q: %s is not a directory", claim, sh.Dir)
		}
	case v.ContainerPath != nil:
		sh.Field = field + ".containerPath.path"
		sh.Dir = v.ContainerPath.Path
		if err := containerMount(sh.Dir, pr.opts.MountInfo); err != nil {
			return Share{}, &FieldError{Field: sh.Field, Err: err}
		}
	case kind != "":
		sh.Field = field + "." + kind
		if pr.opts.ConfigDir == "" {
			return Share{}, fieldErr(sh.Field, "a %s volume is mounted by the kubelet into the launcher Pod: it needs a cluster (not kemuctl run)", kind)
		}
		sh.Dir = filepath.Join(pr.opts.ConfigDir, v.Name)
		if st, err := os.Stat(sh.Dir); err != nil || !st.IsDir() {
			return Share{}, fieldErr(sh.Field, "the launcher Pod has no mount of volume %q at %s", v.Name, sh.Dir)
		}
	default:
		return Share{}, fieldErr(field, "volume %q cannot be shared as a filesystem (only persistentVolumeClaim, configMap, secret, serviceAccount, downwardAPI and containerPath)", v.Name)
	}
	if sh.ReadOnly {
		var st unix.Statfs_t
		if err := unix.Statfs(sh.Dir, &st); err != nil {
			return Share{}, fieldErr(sh.Field, "%s: %w", sh.Dir, err)
		}
		if st.Flags&unix.ST_RDONLY == 0 {
			return Share{}, fieldErr(sh.Field, "the %s is shared read-only, but %s is on a writable mount: it must be mounted read-only (the launcher Pod mounts it so)", kind, sh.Dir)
		}
	}
	return sh, nil
}

// DefaultMountInfo is where the launcher reads its container's mounts.
const DefaultMountInfo = "/proc/self/mountinfo"

// containerMount checks a containerPath: an existing directory, reached
// without symlinks, that is a mount point of the launcher's container (a
// volumeMount of its Pod, as KubeVirt requires), per mountinfo.
func containerMount(dir, mountInfo string) error {
	if mountInfo == "" {
		mountInfo = DefaultMountInfo
	}
	st, err := os.Stat(dir)
	switch {
	case err != nil:
		return fmt.Errorf("the launcher container has no %s: %w", dir, err)
	case !st.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	}
	if real, err := filepath.EvalSymlinks(dir); err != nil || real != dir {
		return fmt.Errorf("%s leads through a symlink (to %q): name the mount itself", dir, real)
	}
	data, err := os.ReadFile(mountInfo)
	if err != nil {
		return fmt.Errorf("reading the container's mounts: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		// ID parentID major:minor root mountpoint options ...
		f := strings.Fields(line)
		if len(f) > 4 && unescapeMountInfo(f[4]) == dir {
			return nil
		}
	}
	return fmt.Errorf("%s is not a mount of the launcher container: a containerPath names a volumeMount of its Pod", dir)
}

// unescapeMountInfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountInfo(s string) string {
	if !strings.Contains(s, "\\") {
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
