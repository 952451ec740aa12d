// Package hostdisk checks, on the node, that the hostDisks a launcher Pod
// mounted are what the cluster allowed. The controller refuses hostDisk
// paths that are not beneath a directory of kemu-config hostDiskDirs, but
// it cannot see the node: the kubelet mounts a hostPath following symlinks,
// so /var/lib/kemu-disks/a.img -> /etc/shadow would hand the host file to
// the guest. Before the node agent lets the launcher start QEMU it resolves
// each path on the host without following any symlink (openat2
// RESOLVE_NO_SYMLINKS) and compares that file with the one mounted in the
// launcher's container (device and inode through /proc/<pid>/root).
package hostdisk

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/api/validation"
)

// DefaultHostRoot is the host's root for a node agent running on the host;
// in its DaemonSet the host's / is mounted read-only at /host (--host-root).
const DefaultHostRoot = "/"

// Check returns one error per hostDisk of vmi whose file (Disk) or allowed
// directory (DiskOrCreate) mounted in the launcher's container — seen under
// launcherRoot, /proc/<launcher pid>/root — is not the one reached from
// hostRoot beneath an allowed directory without a symlink.
func Check(hostRoot, launcherRoot string, allowed []string, vmi *v1.VirtualMachineInstance) field.ErrorList {
	var errs field.ErrorList
	for i := range vmi.Spec.Volumes {
		hd := vmi.Spec.Volumes[i].HostDisk
		if hd == nil {
			continue
		}
		p := field.NewPath("spec", "volumes").Index(i).Child("hostDisk", "path")
		if err := check(hostRoot, launcherRoot, allowed, hd); err != nil {
			errs = append(errs, field.Forbidden(p, err.Error()))
		}
	}
	return errs
}

func check(hostRoot, launcherRoot string, allowed []string, hd *v1.HostDisk) error {
	root, ok := validation.HostDiskRoot(hd.Path, allowed)
	if !ok || path.Clean(hd.Path) != hd.Path {
		return fmt.Errorf("%q is not beneath a directory of %s on this node (%s)", hd.Path, validation.HostDiskDirsKey, strings.Join(allowed, ", "))
	}
	host, err := unix.Open(hostRoot, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening the host's root: %w", err)
	}
	defer unix.Close(host)
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	dir, err := unix.Openat2(host, strings.TrimPrefix(root, "/"), how)
	if err != nil {
		return fmt.Errorf("the allowed directory %s: %w", root, explain(err))
	}
	defer unix.Close(dir)
	what, want := hd.Path, dir
	how.Resolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS
	f, err := unix.Openat2(dir, strings.TrimPrefix(hd.Path, root+"/"), how)
	switch {
	case err == nil:
		defer unix.Close(f)
		want = f
	case errors.Is(err, unix.ENOENT) && hd.Type == v1.HostDiskExistsOrCreate:
		// Not created yet: the launcher creates it inside the mounted
		// allowed directory, which must then be the real one.
		what = root
	default:
		return fmt.Errorf("%s beneath %s: %w", hd.Path, root, explain(err))
	}
	var hostSt unix.Stat_t
	if err := unix.Fstat(want, &hostSt); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	var podSt syscall.Stat_t
	if err := syscall.Stat(launcherRoot+what, &podSt); err != nil {
		return fmt.Errorf("%s in the launcher's container: %w", what, err)
	}
	if uint64(podSt.Dev) != hostSt.Dev || podSt.Ino != hostSt.Ino {
		return fmt.Errorf("the launcher Pod mounted another file at %s than the one beneath %s without symlinks (device %d inode %d, not %d %d)",
			what, root, podSt.Dev, podSt.Ino, hostSt.Dev, hostSt.Ino)
	}
	return nil
}

// explain turns openat2's refusals into words.
func explain(err error) error {
	switch {
	case errors.Is(err, unix.ELOOP):
		return fmt.Errorf("a symlink on the way (hostDisk paths are resolved without symlinks): %w", err)
	case errors.Is(err, unix.EXDEV):
		return fmt.Errorf("the path leaves the allowed directory: %w", err)
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("does not exist on this node: %w", err)
	}
	return err
}
