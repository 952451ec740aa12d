package netsetup

import (
	"errors"
	"fmt"
	"os"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/kemu-dev/kemu/netsetup/nsthread"
)

// tapFlags are a kemu tap's: Ethernet frames, no packet information, a
// virtio-net header (QEMU's vnet_hdr=on), several queues when asked.
func tapFlags(queues int) uint16 {
	f := uint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if queues > 1 {
		f |= unix.IFF_MULTI_QUEUE
	}
	return f
}

// openTap creates the persistent tap name in ns, or attaches to it when it
// exists, and returns one open queue per fd, ready for QEMU. uid/gid (≥ 0)
// become its owner. A tap that exists with other flags (another queue
// count) makes TUNSETIFF fail with EINVAL; the caller deletes and retries.
func openTap(ns netns.NsHandle, name string, queues, uid, gid int) ([]*os.File, error) {
	var files []*os.File
	err := nsthread.Do(ns, func() error {
		for q := range queues {
			// The tap is created in the namespace of the thread that
			// opens /dev/net/tun.
			fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("opening /dev/net/tun: %w", err)
			}
			f := os.NewFile(uintptr(fd), fmt.Sprintf("tap %s queue %d", name, q))
			files = append(files, f)
			ifr, err := unix.NewIfreq(name)
			if err != nil {
				return fmt.Errorf("tap %s: %w", name, err)
			}
			ifr.SetUint16(tapFlags(queues))
			if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
				return &tapError{name: name, op: "TUNSETIFF", err: err}
			}
			if q > 0 {
				continue
			}
			if uid >= 0 {
				if err := unix.IoctlSetInt(fd, unix.TUNSETOWNER, uid); err != nil {
					return &tapError{name: name, op: "TUNSETOWNER", err: err}
				}
			}
			if gid >= 0 {
				if err := unix.IoctlSetInt(fd, unix.TUNSETGROUP, gid); err != nil {
					return &tapError{name: name, op: "TUNSETGROUP", err: err}
				}
			}
			if err := unix.IoctlSetInt(fd, unix.TUNSETPERSIST, 1); err != nil {
				return &tapError{name: name, op: "TUNSETPERSIST", err: err}
			}
		}
		return nil
	})
	if err != nil {
		closeFiles(files)
		return nil, err
	}
	return files, nil
}

type tapError struct {
	name, op string
	err      error
}

func (e *tapError) Error() string { return fmt.Sprintf("tap %s: %s: %v", e.name, e.op, e.err) }
func (e *tapError) Unwrap() error { return e.err }

// isFlagMismatch says whether attaching failed because the tap exists with
// other flags.
func isFlagMismatch(err error) bool {
	var te *tapError
	return errors.As(err, &te) && te.op == "TUNSETIFF" && errors.Is(te.err, unix.EINVAL)
}

func closeFiles(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}
