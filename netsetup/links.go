package netsetup

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/netsetup/nsthread"
)

// linkByName returns the link, or nil when there is none.
func linkByName(h *netlink.Handle, name string) (netlink.Link, error) {
	l, err := h.LinkByName(name)
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("looking up link %s: %w", name, err)
	}
	return l, nil
}

// ensureBridge returns the bridge name, created if missing, with this MTU,
// MAC and alias, up.
func ensureBridge(h *netlink.Handle, name string, mtu int, mac net.HardwareAddr, alias string) (netlink.Link, error) {
	l, err := linkByName(h, name)
	if err != nil {
		return nil, err
	}
	if l != nil && l.Type() != "bridge" {
		return nil, fmt.Errorf("link %s exists and is a %s, not a bridge", name, l.Type())
	}
	if l == nil {
		attrs := netlink.NewLinkAttrs()
		attrs.Name, attrs.MTU, attrs.HardwareAddr = name, mtu, mac
		if err := h.LinkAdd(&netlink.Bridge{LinkAttrs: attrs}); err != nil {
			return nil, fmt.Errorf("creating bridge %s: %w", name, err)
		}
		klog.V(2).InfoS("Created bridge", "bridge", name)
		if l, err = h.LinkByName(name); err != nil {
			return nil, fmt.Errorf("bridge %s: %w", name, err)
		}
	}
	if l.Attrs().MTU != mtu {
		if err := h.LinkSetMTU(l, mtu); err != nil {
			return nil, fmt.Errorf("bridge %s: setting MTU %d: %w", name, mtu, err)
		}
	}
	if mac != nil && l.Attrs().HardwareAddr.String() != mac.String() {
		if err := h.LinkSetHardwareAddr(l, mac); err != nil {
			return nil, fmt.Errorf("bridge %s: setting MAC %s: %w", name, mac, err)
		}
	}
	if alias != "" && l.Attrs().Alias != alias {
		if err := h.LinkSetAlias(l, alias); err != nil {
			return nil, fmt.Errorf("bridge %s: setting alias: %w", name, err)
		}
	}
	if err := h.LinkSetUp(l); err != nil {
		return nil, fmt.Errorf("bridge %s: setting up: %w", name, err)
	}
	return l, nil
}

// ensureAddr puts addr on l (replacing an equal one).
func ensureAddr(h *netlink.Handle, l netlink.Link, addr *netlink.Addr) error {
	if err := h.AddrReplace(l, addr); err != nil {
		return fmt.Errorf("adding %s to %s: %w", addr.IPNet, l.Attrs().Name, err)
	}
	return nil
}

// ensureTap creates (or attaches to) the tap, enslaves it to master with the
// given MTU, sets it up, and returns its queues' fds.
func ensureTap(ns netns.NsHandle, h *netlink.Handle, name string, queues, uid, gid, mtu int, master netlink.Link) ([]*os.File, error) {
	files, err := openTap(ns, name, queues, uid, gid)
	if isFlagMismatch(err) {
		// It exists with another queue count (the VMI changed): recreate.
		klog.InfoS("Recreating tap with other flags", "tap", name, "queues", queues)
		if err := deleteLink(h, name); err != nil {
			return nil, err
		}
		files, err = openTap(ns, name, queues, uid, gid)
	}
	if err != nil {
		return nil, err
	}
	fail := func(err error) ([]*os.File, error) {
		closeFiles(files)
		return nil, err
	}
	l, err := h.LinkByName(name)
	if err != nil {
		return fail(fmt.Errorf("tap %s: %w", name, err))
	}
	if l.Attrs().MTU != mtu {
		if err := h.LinkSetMTU(l, mtu); err != nil {
			return fail(fmt.Errorf("tap %s: setting MTU %d: %w", name, mtu, err))
		}
	}
	if l.Attrs().MasterIndex != master.Attrs().Index {
		if err := h.LinkSetMaster(l, master); err != nil {
			return fail(fmt.Errorf("tap %s: enslaving to %s: %w", name, master.Attrs().Name, err))
		}
	}
	if err := h.LinkSetUp(l); err != nil {
		return fail(fmt.Errorf("tap %s: setting up: %w", name, err))
	}
	return files, nil
}

// deleteLink removes the link if it exists.
func deleteLink(h *netlink.Handle, name string) error {
	l, err := linkByName(h, name)
	if err != nil || l == nil {
		return err
	}
	if err := h.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("deleting link %s: %w", name, err)
	}
	klog.V(2).InfoS("Deleted link", "link", name)
	return nil
}

// ipv4Addrs are a link's IPv4 addresses.
func ipv4Addrs(h *netlink.Handle, l netlink.Link) ([]netlink.Addr, error) {
	addrs, err := h.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		return nil, fmt.Errorf("listing addresses of %s: %w", l.Attrs().Name, err)
	}
	return addrs, nil
}

// setForwarding turns on IPv4 forwarding in ns (a per-namespace sysctl, so
// the file is opened from a thread inside it).
func setForwarding(ns netns.NsHandle) error {
	return nsthread.Do(ns, func() error {
		const path = "/proc/sys/net/ipv4/ip_forward"
		b, err := os.ReadFile(path)
		if err == nil && len(b) > 0 && b[0] == '1' {
			return nil
		}
		err = os.WriteFile(path, []byte("1\n"), 0o644)
		if errors.Is(err, unix.EROFS) {
			// A container's /proc/sys is read-only; a procfs of our own
			// (CAP_SYS_ADMIN) is not, and the sysctl is the namespace's.
			err = writePrivateProc("sys/net/ipv4/ip_forward", "1\n")
		}
		if err != nil {
			return fmt.Errorf("enabling IPv4 forwarding (or set the Pod's sysctl net.ipv4.ip_forward=1): %w", err)
		}
		return nil
	})
}

// writePrivateProc writes value to rel in a procfs mounted just for that
// and unmounted again.
func writePrivateProc(rel, value string) error {
	dir, err := os.MkdirTemp("", "kemu-proc-")
	if err != nil {
		return err
	}
	defer os.Remove(dir)
	if err := unix.Mount("proc", dir, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("/proc/sys is read-only and mounting a procfs failed: %w", err)
	}
	defer func() { _ = unix.Unmount(dir, unix.MNT_DETACH) }()
	return os.WriteFile(filepath.Join(dir, rel), []byte(value), 0o644)
}
