package launcher

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"k8s.io/klog/v2"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/devices/cgroup"
)

// deviceCgroup creates QEMU's cgroup with the devices its VMI needs: the
// basics, /dev/kvm under KVM, /dev/net/tun and /dev/vhost-net for taps,
// and the block devices of block-mode volumes (and of block-mode claims
// under ephemeral overlays). It returns the group's fd.
func (l *Launcher) deviceCgroup(accel string, vhostNet bool) (int, error) {
	var blocks []string
	for _, v := range l.prepared.Volumes {
		if v.Block {
			blocks = append(blocks, v.Path)
		}
		if v.BaseBlock { // an ephemeral volume's block-mode claim, read under its overlay
			blocks = append(blocks, v.Base)
		}
	}
	taps := false
	for _, n := range l.nics {
		taps = taps || len(n.TapFDs) > 0
	}
	allow, err := cgroup.Default(accel == "kvm", taps, vhostNet && taps, blocks...)
	if err != nil {
		return 0, fmt.Errorf("launcher: device allowlist: %w", err)
	}
	if os.Getpid() == 1 {
		// The launcher is its container's init: its mount namespace is the
		// container's own, where a cgroup2 mount of its own is private. An
		// unprivileged container on a hybrid host has none, on a cgroup v2
		// host a read-only one (docs/deploy.md); the mount shows only the
		// container's own cgroup subtree.
		if ok, err := cgroup.MountOwn("/run/kemu-cgroup2"); err != nil {
			return 0, fmt.Errorf("launcher: QEMU's device cgroup (run without it only with the explicit opt-out): %w", err)
		} else if ok {
			klog.InfoS("Mounted the container's cgroup2 subtree in the launcher's mount namespace", "path", "/run/kemu-cgroup2")
		}
	}
	removeStaleDeviceCgroups()
	// The VMI's host name (at most 63 bytes) keeps the name within a file
	// name's 255 bytes for a VMI name of any length.
	name := fmt.Sprintf("%s%s-%s-%d-%d", deviceCgroupPrefix, l.vmi.Namespace, v1.DeriveHostname(l.vmi.Name), os.Getpid(), cgroupSeq.Add(1))
	if l.cgroup, err = cgroup.Create("", name, allow); err != nil {
		return 0, fmt.Errorf("launcher: QEMU's device cgroup (run without it only with the explicit opt-out): %w", err)
	}
	fd, err := l.cgroup.FD()
	if err != nil {
		return 0, fmt.Errorf("launcher: QEMU's device cgroup: %w", err)
	}
	klog.V(2).InfoS("QEMU device allowlist", "cgroup", l.cgroup.Path(), "allow", allow.Strings())
	return fd, nil
}

// cgroupSeq keeps the names of device cgroups made by one process apart.
var cgroupSeq atomic.Uint64

// deviceCgroupPrefix starts the name of every QEMU device cgroup; the name
// ends in -<launcher pid>-<n>.
const deviceCgroupPrefix = "kemu-qemu-"

// removeStaleDeviceCgroups removes the empty device cgroups that launchers
// killed without a chance to clean up (SIGKILL) left beside this one.
func removeStaleDeviceCgroups() {
	h, err := cgroup.Self()
	if err != nil {
		return
	}
	entries, err := os.ReadDir(h.Dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || !strings.HasPrefix(name, deviceCgroupPrefix) {
			continue
		}
		parts := strings.Split(name, "-")
		if len(parts) < 2 {
			continue
		}
		pid, err := strconv.Atoi(parts[len(parts)-2])
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue
		}
		// rmdir fails on a cgroup that still has processes: nothing is killed.
		if err := os.Remove(filepath.Join(h.Dir, name)); err == nil {
			klog.InfoS("Removed a stale QEMU device cgroup", "cgroup", name)
		}
	}
}

// DeviceCgroup is the cgroup confining QEMU's devices, or "" when the
// launcher runs without it (Config.NoDeviceCgroup).
func (l *Launcher) DeviceCgroup() string {
	if l.cgroup == nil {
		return ""
	}
	return l.cgroup.Path()
}
