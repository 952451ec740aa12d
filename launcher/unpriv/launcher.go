package unpriv

import (
	"fmt"
	"os"
	"slices"
	"syscall"

	"kernel.org/pub/linux/libs/security/libcap/cap"
)

// LauncherKeeps are the capabilities a launcher keeps once its VM runs:
// KILL to signal QEMU (another user) when it must stop, NET_ADMIN to take
// the VM's taps, bridge and nftables rules down when it ends. Everything
// else (SYS_ADMIN, BPF, CHOWN, DAC_OVERRIDE, SETUID, …) served only the
// setup.
var LauncherKeeps = []cap.Value{cap.KILL, cap.NET_ADMIN}

// DropLauncherCapabilities is for the launcher process once QEMU runs: it
// joins QEMU's group (to reach QEMU's group-only sockets without
// DAC_OVERRIDE), then reduces every thread's bounding, permitted, effective
// and inheritable sets to keep and clears the ambient set. It changes the
// whole process for good: call it from a launcher's main, never from a
// library or a test process. A launcher that is not root has nothing to drop.
func DropLauncherCapabilities(qemu Identity, keep ...cap.Value) error {
	if os.Geteuid() != 0 {
		return nil
	}
	if qemu.GID != 0 {
		groups, err := syscall.Getgroups()
		if err != nil {
			return fmt.Errorf("unpriv: getgroups: %w", err)
		}
		if !slices.Contains(groups, qemu.GID) {
			if err := syscall.Setgroups(append(groups, qemu.GID)); err != nil {
				return fmt.Errorf("unpriv: joining QEMU's group %d: %w", qemu.GID, err)
			}
		}
	}
	if err := cap.ResetAmbient(); err != nil {
		return fmt.Errorf("unpriv: clearing ambient capabilities: %w", err)
	}
	var drop []cap.Value
	for c := cap.Value(0); c < cap.MaxBits(); c++ {
		if !slices.Contains(keep, c) {
			drop = append(drop, c)
		}
	}
	// The bounding set first: that needs SETPCAP, which the next step drops.
	if err := cap.DropBound(drop...); err != nil {
		return fmt.Errorf("unpriv: dropping capabilities from the bounding set: %w", err)
	}
	set := cap.NewSet()
	for _, f := range []cap.Flag{cap.Permitted, cap.Effective} {
		if err := set.SetFlag(f, true, keep...); err != nil {
			return fmt.Errorf("unpriv: %w", err)
		}
	}
	if err := set.SetProc(); err != nil {
		return fmt.Errorf("unpriv: setting the launcher's capabilities to %v: %w", keep, err)
	}
	return nil
}
