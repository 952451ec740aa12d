// Package netsetuptest builds the network namespaces netsetup's tests and
// its users' tests (launcher, kemu-launcher) run against: a "pod" network
// namespace whose eth0 is one end of a veth pair, the other end in a "node"
// namespace standing in for the node and the cluster (10.244.1.1, and
// 198.51.100.1 beyond it). It needs root.
package netsetuptest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/kemu-dev/kemu/netsetup/nsthread"
)

const (
	PodIP     = "10.244.1.5"
	PodCIDR   = "10.244.1.5/24"
	NodeIP    = "10.244.1.1"
	NodeCIDR  = "10.244.1.1/24"
	OutsideIP = "198.51.100.1" // on the node namespace's lo: beyond the pod network
	PodMTU    = 1450
)

// PodEnv is a pod network namespace wired to a node namespace.
type PodEnv struct {
	Name   string // unique, kt + random
	Pod    netns.NsHandle
	Node   netns.NsHandle
	PodMAC net.HardwareAddr
	Path   string // the pod namespace's path, for Options.NetNSPath
}

func RandName(t testing.TB) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "kt" + hex.EncodeToString(b)
}

// NewNamedNS creates a named network namespace (/var/run/netns/name) and
// removes it at cleanup.
func NewNamedNS(t testing.TB, name string) netns.NsHandle {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("netsetup's namespace tests need root")
	}
	type res struct {
		ns  netns.NsHandle
		err error
	}
	c := make(chan res, 1)
	go func() {
		// Back to the original namespace and unlocked: a thread that ends
		// would take QEMUs started from it along (Pdeathsig).
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			c <- res{netns.None(), err}
			return
		}
		defer orig.Close()
		ns, err := netns.NewNamed(name)
		if rerr := netns.Set(orig); rerr != nil {
			c <- res{ns, errors.Join(err, rerr)} // stays locked: the thread is discarded
			return
		}
		runtime.UnlockOSThread()
		c <- res{ns, err}
	}()
	r := <-c
	if r.err != nil {
		t.Fatalf("creating network namespace %s: %v", name, r.err)
	}
	t.Cleanup(func() {
		r.ns.Close()
		if err := netns.DeleteNamed(name); err != nil {
			t.Errorf("deleting network namespace %s: %v", name, err)
		}
	})
	return r.ns
}

func Handle(t testing.TB, ns netns.NsHandle) *netlink.Handle {
	t.Helper()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

func Must(t testing.TB, err error, what string, args ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", fmt.Sprintf(what, args...), err)
	}
}

func Addr(t testing.TB, cidr string) *netlink.Addr {
	t.Helper()
	a, err := netlink.ParseAddr(cidr)
	Must(t, err, "address %s", cidr)
	return a
}

func NewPodEnv(t testing.TB) *PodEnv {
	t.Helper()
	name := RandName(t)
	e := &PodEnv{Name: name, Pod: NewNamedNS(t, name+"p"), Node: NewNamedNS(t, name+"n"), Path: "/var/run/netns/" + name + "p"}
	hp, hn := Handle(t, e.Pod), Handle(t, e.Node)
	attrs := netlink.NewLinkAttrs()
	attrs.Name, attrs.MTU = "eth0", PodMTU
	Must(t, hp.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: "pod0", PeerNamespace: netlink.NsFd(e.Node)}), "veth")
	eth0, err := hp.LinkByName("eth0")
	Must(t, err, "eth0")
	e.PodMAC = eth0.Attrs().HardwareAddr
	Must(t, hp.AddrAdd(eth0, Addr(t, PodCIDR)), "pod address")
	for _, h := range []*netlink.Handle{hp, hn} {
		lo, err := h.LinkByName("lo")
		Must(t, err, "lo")
		Must(t, h.LinkSetUp(lo), "lo up")
	}
	Must(t, hp.LinkSetUp(eth0), "eth0 up")
	Must(t, hp.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: net.ParseIP(NodeIP)}), "default route")
	peer, err := hn.LinkByName("pod0")
	Must(t, err, "pod0")
	Must(t, hn.AddrAdd(peer, Addr(t, NodeCIDR)), "node address")
	Must(t, hn.LinkSetMTU(peer, PodMTU), "node MTU")
	Must(t, hn.LinkSetUp(peer), "pod0 up")
	lo, _ := hn.LinkByName("lo")
	Must(t, hn.AddrAdd(lo, Addr(t, OutsideIP+"/32")), "outside address")
	return e
}

// get connects from ns to Addr and returns what the server says first.
func Get(ctx context.Context, ns netns.NsHandle, Addr string) (string, error) {
	var c net.Conn
	if err := nsthread.Do(ns, func() (err error) {
		d := net.Dialer{Timeout: 2 * time.Second}
		c, err = d.DialContext(ctx, "tcp4", Addr)
		return err
	}); err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	return strings.TrimSpace(string(b)), err
}

// HTTPGet fetches path from Addr over a connection made in ns.
func HTTPGet(ctx context.Context, ns netns.NsHandle, Addr, path string) (string, error) {
	var c net.Conn
	if err := nsthread.Do(ns, func() (err error) {
		d := net.Dialer{Timeout: 2 * time.Second}
		c, err = d.DialContext(ctx, "tcp4", Addr)
		return err
	}); err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.0\r\n\r\n", path); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return "", err
	}
	s := string(b)
	if !strings.HasPrefix(s, "HTTP/1.") || !strings.Contains(s, " 200 ") {
		return "", fmt.Errorf("response %q", s)
	}
	_, body, _ := strings.Cut(s, "\r\n\r\n")
	return strings.TrimSpace(body), nil
}
