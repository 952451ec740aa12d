package netsetup

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"

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
			if err := attachTap(fd, ifr); err != nil {
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

// tapBusyBackoff bounds the wait for a queue of the persistent tap that is
// still attached to an earlier holder: a QEMU that is exiting, or a child
// process forked meanwhile that holds a copy of the descriptor until its
// exec closes it (O_CLOEXEC). About 2.5 s in all.
var tapBusyBackoff = wait.Backoff{Duration: 20 * time.Millisecond, Factor: 2, Steps: 7}

// attachTap is TUNSETIFF, retried while the tap's queue is busy (EBUSY).
func attachTap(fd int, ifr *unix.Ifreq) error {
	var err error
	b := tapBusyBackoff
	for {
		if err = unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); !errors.Is(err, unix.EBUSY) || b.Steps == 0 {
			return err
		}
		time.Sleep(b.Step())
	}
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
