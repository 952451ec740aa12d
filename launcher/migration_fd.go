package launcher

import (
	"context"
	"fmt"
	"net"

	"k8s.io/klog/v2"
)

// The names under which the source passes its connected migration
// sockets to QEMU (getfd): the RAM stream and one NBD client per disk.
const migrationMainFD = "migration-main"

func migrationDiskFD(i int) string { return fmt.Sprintf("migration-nbd%d", i) }

// passSocket connects to the unix socket path and hands the connection to
// QEMU under name. The launcher connects, not QEMU: the node agent's
// source sockets are reachable by root only, and QEMU runs as its own
// user without capabilities. The launcher's copies are closed on return;
// QEMU holds the only one.
func (l *Launcher) passSocket(ctx context.Context, name, path string) error {
	d := net.Dialer{Timeout: qmpConnectTimeout}
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return fmt.Errorf("launcher: connecting to %s: %w", path, err)
	}
	defer c.Close()
	f, err := c.(*net.UnixConn).File()
	if err != nil {
		return fmt.Errorf("launcher: the descriptor of %s: %w", path, err)
	}
	defer f.Close()
	if err := l.mon.GetFD(ctx, name, f); err != nil {
		return fmt.Errorf("launcher: passing the connection to %s to QEMU: %w", path, err)
	}
	return nil
}

// dropFD closes a descriptor passed with passSocket that QEMU did not
// take (a command that failed before using it). QEMU answers an error
// when it had already taken it: nothing is left then.
func (l *Launcher) dropFD(ctx context.Context, name string) {
	if err := l.mon.CloseFD(ctx, name); err != nil {
		klog.V(2).InfoS("Closing a migration descriptor in QEMU", "vmi", klog.KObj(l.vmi), "fd", name, "err", err)
	}
}
