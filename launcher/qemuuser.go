package launcher

import (
	"fmt"
	"os"
	"strings"
	"syscall"

	"github.com/kemu-dev/kemu/launcher/unpriv"
)

// qemuIdentity is who QEMU runs as (unpriv.ForQEMU), plus the groups of the
// device nodes QEMU opens itself: /dev/kvm, and /dev/vhost-net with
// vhost-net. Tap fds come open from the launcher.
func (l *Launcher) qemuIdentity(accel string, vhostNet bool) (unpriv.Identity, error) {
	id := unpriv.ForQEMU(os.Geteuid())
	if id.UID == os.Geteuid() {
		return id, nil // not root: QEMU runs as the launcher's own user
	}
	var devs []string
	if accel == "kvm" {
		devs = append(devs, "/dev/kvm")
	}
	if vhostNet {
		devs = append(devs, "/dev/vhost-net")
	}
	for _, dev := range devs {
		var st syscall.Stat_t
		if err := syscall.Stat(dev, &st); err != nil {
			return id, fmt.Errorf("launcher: %s: %w", dev, err)
		}
		switch {
		case st.Mode&0o006 == 0o006: // anyone may open it
		case st.Mode&0o060 == 0o060 && st.Gid != 0:
			id.Groups = append(id.Groups, int(st.Gid))
		default:
			return id, fmt.Errorf("launcher: QEMU (uid %d) cannot open %s: mode %04o, owner %d:%d (it needs rw for others, or for a non-root group)",
				id.UID, dev, st.Mode&0o7777, st.Uid, st.Gid)
		}
	}
	return id, nil
}

// grantQEMU gives QEMU's user what it writes: the runtime directory becomes
// root:<QEMU's group> 0770 (QEMU creates its sockets there; nobody else gets
// in), and every writable disk (overlays, emptyDisks, hostDisks, claims, block
// devices) and the EFI variables become QEMU's, as KubeVirt chowns disk
// images to 107. Read-only inputs (containerDisk bases, cloud-init ISOs,
// kernels) only need to be readable: QEMU says which one is not.
func (l *Launcher) grantQEMU(id unpriv.Identity) error {
	if os.Geteuid() != 0 || id.UID == 0 {
		return nil
	}
	if err := os.Chown(l.cfg.Dir, 0, id.GID); err != nil {
		return fmt.Errorf("launcher: runtime directory for QEMU: %w", err)
	}
	if err := os.Chmod(l.cfg.Dir, 0o770); err != nil {
		return fmt.Errorf("launcher: runtime directory for QEMU: %w", err)
	}
	if err := l.grantFilesystems(id); err != nil {
		return err
	}
	if err := l.grantHugepages(id); err != nil {
		return err
	}
	if err := l.grantTPM(id); err != nil {
		return err
	}
	var paths []string
	for _, v := range l.prepared.Volumes {
		if !v.ReadOnly {
			paths = append(paths, v.Path)
		}
	}
	if l.paths.EFIVars != "" {
		paths = append(paths, l.paths.EFIVars)
	}
	for _, p := range paths {
		if err := os.Chown(p, id.UID, id.GID); err != nil {
			return fmt.Errorf("launcher: giving %s to QEMU's user %d: %w", p, id.UID, err)
		}
	}
	return nil
}

// permissionHint explains a QEMU start that failed on file permissions.
func permissionHint(stderr string) string {
	if !strings.Contains(stderr, "Permission denied") || os.Geteuid() != 0 {
		return ""
	}
	return fmt.Sprintf(" (QEMU runs as uid %d gid %d: every file it opens, and every directory on the way, must be reachable by that user)", unpriv.UID, unpriv.GID)
}
