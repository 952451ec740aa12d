package netsetup

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
	"github.com/vishvananda/netns"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/netsetup/nsthread"
)

// dhcpServer answers the guest of one interface on its bridge. The socket
// is opened on a thread inside the pod network namespace and bound to the
// bridge (SO_BINDTODEVICE), so it keeps working from any goroutine.
type dhcpServer struct {
	iface string // the bridge
	lease *Lease
	conn  *net.UDPConn
	done  chan struct{}
}

// startDHCP opens the server's socket in ns on the bridge and serves until
// ctx ends or stop is called.
func startDHCP(ctx context.Context, ns netns.NsHandle, bridge string, lease *Lease) (*dhcpServer, error) {
	s := &dhcpServer{iface: bridge, lease: lease, done: make(chan struct{})}
	err := nsthread.Do(ns, func() error {
		c, err := server4.NewIPv4UDPConn(bridge, &net.UDPAddr{Port: dhcpv4.ServerPort})
		s.conn = c
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("DHCP server on %s: %w", bridge, err)
	}
	stopped := make(chan struct{})
	go func() {
		defer close(s.done)
		s.serve()
		close(stopped)
	}()
	go func() {
		select {
		case <-ctx.Done():
			s.conn.Close()
		case <-stopped:
		}
	}()
	klog.V(2).InfoS("DHCP server started", "bridge", bridge, "mac", lease.MAC, "ip", lease.IP)
	return s, nil
}

// stop closes the socket and waits for the server goroutine.
func (s *dhcpServer) stop() {
	s.conn.Close()
	<-s.done
}

func (s *dhcpServer) serve() {
	buf := make([]byte, 4096)
	bcast := &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ClientPort}
	for {
		n, _, err := s.conn.ReadFrom(buf)
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				klog.ErrorS(err, "DHCP server stopped", "bridge", s.iface)
			}
			return
		}
		req, err := dhcpv4.FromBytes(buf[:n])
		if err != nil {
			klog.V(4).InfoS("Ignoring malformed DHCP packet", "bridge", s.iface, "err", err)
			continue
		}
		resp, err := s.lease.Reply(req)
		if err != nil {
			klog.ErrorS(err, "Building DHCP reply", "bridge", s.iface, "request", req.Summary())
			continue
		}
		if resp == nil {
			continue
		}
		// Always broadcast: the guest may not have its address yet, and in
		// the bridge binding the pod namespace has no route to it.
		if _, err := s.conn.WriteTo(resp.ToBytes(), bcast); err != nil {
			klog.ErrorS(err, "Sending DHCP reply", "bridge", s.iface)
			continue
		}
		klog.V(2).InfoS("DHCP reply", "bridge", s.iface, "type", resp.MessageType(), "mac", req.ClientHWAddr, "ip", resp.YourIPAddr)
	}
}
