//go:build qemu

package migration

import (
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"golang.org/x/sys/unix"

	"github.com/kemu-dev/kemu/netsetup/netsetuptest"
	"github.com/kemu-dev/kemu/netsetup/nsthread"
)

// netproofDHCP counts the DHCP DISCOVERs a guest sends on one link of a
// pod namespace, read from an AF_PACKET socket bound to that link.
type netproofDHCP struct {
	fd   int
	stop chan struct{}
	done chan struct{}
	once sync.Once

	mu   sync.Mutex
	seen []time.Time
}

// netproofWatchDHCP starts counting on link in env's pod namespace.
func netproofWatchDHCP(t *testing.T, env *netsetuptest.PodEnv, link string) *netproofDHCP {
	t.Helper()
	l, err := netsetuptest.Handle(t, env.Pod).LinkByName(link)
	if err != nil {
		t.Fatalf("%s in the pod namespace: %v", link, err)
	}
	// ETH_P_ALL: a bridge port's frames reach protocol-specific packet
	// sockets only after the bridge's rx handler, which takes them.
	proto := netproofHtons(unix.ETH_P_ALL)
	w := &netproofDHCP{fd: -1, stop: make(chan struct{}), done: make(chan struct{})}
	err = nsthread.Do(env.Pod, func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(proto))
		if err != nil {
			return err
		}
		w.fd = fd
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: l.Attrs().Index})
	})
	if err == nil {
		// A receive timeout lets the reader see stop without closing the
		// descriptor under a blocked recvfrom.
		err = unix.SetsockoptTimeval(w.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100_000})
	}
	if err != nil {
		if w.fd >= 0 {
			unix.Close(w.fd)
		}
		t.Fatalf("packet socket on %s: %v", link, err)
	}
	go w.read()
	t.Cleanup(w.close)
	return w
}

func (w *netproofDHCP) read() {
	defer close(w.done)
	buf := make([]byte, 65536)
	for {
		select {
		case <-w.stop:
			return
		default:
		}
		n, from, err := unix.Recvfrom(w.fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue // what the host sends the guest
		}
		if netproofIsDiscover(buf[:n]) {
			w.mu.Lock()
			w.seen = append(w.seen, time.Now())
			w.mu.Unlock()
		}
	}
}

// netproofIsDiscover says whether an Ethernet frame is a DHCP DISCOVER
// (IPv4, UDP to port 67, message type 1).
func netproofIsDiscover(f []byte) bool {
	if len(f) < 14+20 || binary.BigEndian.Uint16(f[12:14]) != unix.ETH_P_IP {
		return false
	}
	ip := f[14:]
	ihl := int(ip[0]&0x0f) * 4
	if ip[0]>>4 != 4 || ihl < 20 || ip[9] != unix.IPPROTO_UDP || len(ip) < ihl+8 {
		return false
	}
	udp := ip[ihl:]
	if binary.BigEndian.Uint16(udp[2:4]) != dhcpv4.ServerPort {
		return false
	}
	m, err := dhcpv4.FromBytes(udp[8:])
	return err == nil && m.OpCode == dhcpv4.OpcodeBootRequest && m.MessageType() == dhcpv4.MessageTypeDiscover
}

// discovers returns when each DISCOVER so far was seen.
func (w *netproofDHCP) discovers() []time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]time.Time(nil), w.seen...)
}

// discoversUntil polls until a DISCOVER was seen or the deadline passed,
// and returns those seen.
func (w *netproofDHCP) discoversUntil(t *testing.T, deadline time.Time) []time.Time {
	t.Helper()
	for {
		if ds := w.discovers(); len(ds) > 0 || time.Now().After(deadline) {
			return ds
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (w *netproofDHCP) close() {
	w.once.Do(func() {
		close(w.stop)
		<-w.done
		unix.Close(w.fd)
	})
}

// netproofHtons is v in network byte order, as the packet socket calls
// take the protocol.
func netproofHtons(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.NativeEndian.Uint16(b[:])
}
