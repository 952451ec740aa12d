// Package dropcaps reduces kemu-launcher's own capabilities once its VM
// runs. It is kept apart from launcher/unpriv so that only kemu-launcher
// links libcap's psx (which, in a cgo build, wraps every pthread_create):
// kemuctl and the tests that start QEMU do not need it.
package dropcaps

import (
	"fmt"
	"os"
	"slices"
	"syscall"

	"kernel.org/pub/linux/libs/security/libcap/cap"

	"github.com/kemu-dev/kemu/launcher/unpriv"
)

// Keep are the capabilities a launcher keeps once its VM runs (those of
// them it has):
// KILL to signal QEMU (another user) when it must stop, NET_ADMIN to take
// the VM's taps, bridge and nftables rules down when it ends. Everything
// else (SYS_ADMIN, BPF, CHOWN, DAC_OVERRIDE, SETUID, …) served only the
// setup.
var Keep = []cap.Value{cap.KILL, cap.NET_ADMIN}

// Launcher is for the launcher process once QEMU runs: it
// joins QEMU's group (to reach QEMU's group-only sockets without
// DAC_OVERRIDE), then reduces every thread's bounding, permitted, effective
// and inheritable sets to keep and clears the ambient set. It changes the
// whole process for good: call it from a launcher's main, never from a
// library or a test process. A launcher that is not root has nothing to drop.
func Launcher(qemu unpriv.Identity, keep ...cap.Value) error {
	if os.Geteuid() != 0 {
		return nil
	}
	if qemu.GID != 0 {
		groups, err := syscall.Getgroups()
		if err != nil {
			return fmt.Errorf("dropcaps: getgroups: %w", err)
		}
		if !slices.Contains(groups, qemu.GID) {
			if err := syscall.Setgroups(append(groups, qemu.GID)); err != nil {
				return fmt.Errorf("dropcaps: joining QEMU's group %d: %w", qemu.GID, err)
			}
		}
	}
	// A capability the launcher never had (NET_ADMIN in a passt-only
	// launcher Pod, controller/template) cannot be kept: keep what it has.
	if cur, err := cap.GetPID(0); err == nil {
		keep = slices.DeleteFunc(slices.Clone(keep), func(c cap.Value) bool {
			has, err := cur.GetFlag(cap.Permitted, c)
			return err == nil && !has
		})
	}
	if err := cap.ResetAmbient(); err != nil {
		return fmt.Errorf("dropcaps: clearing ambient capabilities: %w", err)
	}
	var drop []cap.Value
	for c := cap.Value(0); c < cap.MaxBits(); c++ {
		if !slices.Contains(keep, c) {
			drop = append(drop, c)
		}
	}
	// The bounding set first: that needs SETPCAP, which the next step drops.
	if err := cap.DropBound(drop...); err != nil {
		return fmt.Errorf("dropcaps: dropping capabilities from the bounding set: %w", err)
	}
	set := cap.NewSet()
	for _, f := range []cap.Flag{cap.Permitted, cap.Effective} {
		if err := set.SetFlag(f, true, keep...); err != nil {
			return fmt.Errorf("dropcaps: %w", err)
		}
	}
	if err := set.SetProc(); err != nil {
		return fmt.Errorf("dropcaps: setting the launcher's capabilities to %v: %w", keep, err)
	}
	return nil
}
