//go:build qemu

// Root tests with real network namespaces: a "pod" namespace whose eth0 is
// one end of a veth pair, the other end in a "node" namespace standing in
// for the node and the cluster (10.244.1.1, and 198.51.100.1 beyond it).
// They need root and fail without it; the VM tests also need QEMU and the
// test guest (bash hack/testguest/build.sh):
//
//	go test -tags qemu ./netsetup/
package netsetup

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"
	"unsafe"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/kemu-dev/kemu/netsetup/netsetuptest"

	"github.com/kemu-dev/kemu/netsetup/nsthread"
)

const (
	podIP     = netsetuptest.PodIP
	podCIDR   = netsetuptest.PodCIDR
	nodeIP    = netsetuptest.NodeIP
	outsideIP = netsetuptest.OutsideIP
	podMTU    = netsetuptest.PodMTU
)

// podEnv is netsetuptest's pod and node namespaces, with this package's
// test helpers as methods.
type podEnv struct{ *netsetuptest.PodEnv }

func newPodEnv(t testing.TB) *podEnv { return &podEnv{netsetuptest.NewPodEnv(t)} }

var (
	handle     = netsetuptest.Handle
	must       = netsetuptest.Must
	get        = netsetuptest.Get
	newNamedNS = netsetuptest.NewNamedNS
	httpGet    = netsetuptest.HTTPGet
)

// links lists the link names in ns.
func links(t testing.TB, ns netns.NsHandle) []string {
	t.Helper()
	ls, err := handle(t, ns).LinkList()
	must(t, err, "links")
	var names []string
	for _, l := range ls {
		names = append(names, l.Attrs().Name)
	}
	return names
}

// tables lists the nftables tables in ns.
func tables(t testing.TB, ns netns.NsHandle) []string {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	must(t, err, "nftables")
	ts, err := c.ListTables()
	must(t, err, "nftables tables")
	var names []string
	for _, tb := range ts {
		names = append(names, tb.Name)
	}
	return names
}

// ruleCount counts the rules of a table.
func ruleCount(t testing.TB, ns netns.NsHandle, table string) int {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	must(t, err, "nftables")
	chains, err := c.ListChains()
	must(t, err, "chains")
	n := 0
	for _, ch := range chains {
		if ch.Table.Name != table {
			continue
		}
		rs, err := c.GetRules(ch.Table, ch)
		must(t, err, "rules")
		n += len(rs)
	}
	return n
}

// listen opens a TCP listener in ns that answers every connection with
// reply and the remote address it saw.
func listen(t testing.TB, ns netns.NsHandle, addr, reply string) net.Listener {
	t.Helper()
	var l net.Listener
	must(t, nsthread.Do(ns, func() (err error) { l, err = net.Listen("tcp4", addr); return err }), "listen on %s", addr)
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "%s from %s\n", reply, c.RemoteAddr().(*net.TCPAddr).IP)
			c.Close()
		}
	}()
	return l
}

// poll calls f until it succeeds or ctx ends.
func poll(ctx context.Context, every time.Duration, f func() error) error {
	var last error
	for {
		if last = f(); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), last)
		case <-time.After(every):
		}
	}
}

// tapFlagsOf reads the flags of an open tap queue (TUNGETIFF).
func tapFlagsOf(f *os.File) (uint16, error) {
	var ifr [unix.IFNAMSIZ + 24]byte
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var errno error
	if err := rc.Control(func(fd uintptr) {
		_, _, e := unix.Syscall(unix.SYS_IOCTL, fd, unix.TUNGETIFF, uintptr(unsafe.Pointer(&ifr[0])))
		if e != 0 {
			errno = e
		}
	}); err != nil {
		return 0, err
	}
	if errno != nil {
		return 0, fmt.Errorf("TUNGETIFF: %w", errno)
	}
	return *(*uint16)(unsafe.Pointer(&ifr[unix.IFNAMSIZ])), nil
}
