package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// holderScript runs as the first process of a node's new network, mount
// and UTS namespaces (unshare --propagation private: nothing mounted here
// reaches the host). It gives the node its host name, a /run of its own
// (pods' network namespaces, containerd's shim sockets), a sysfs that shows
// its own network devices (keeping the host's cgroup mounts), its private
// /var/lib and /var/log, and loopback and IPv4 forwarding; then it makes
// every mount shared inside the node, as on a systemd host (the kubelet and
// containerd propagate Pod mounts), prints "ready" and holds the
// namespaces. Paths come from the environment, not the command line, so
// that killMentioning(node folder) spares the holder.
const holderScript = `set -eu
hostname "$KEMU_NODE"
mount -t tmpfs -o mode=755,size=256m kemu-node-run /run
mkdir /run/kemu-cgroup
mount --rbind /sys/fs/cgroup /run/kemu-cgroup
mount -t sysfs kemu-node-sys /sys
mount --move /run/kemu-cgroup /sys/fs/cgroup
rmdir /run/kemu-cgroup
mount --bind "$KEMU_NODE_DIR/var-lib" /var/lib
mount --bind "$KEMU_NODE_DIR/var-log" /var/log
mkdir -p /run/netns /var/lib/kubelet/device-plugins /var/lib/kemu /var/log/pods /var/log/containers
mount --make-rshared /
ip link set lo up
echo 1 > /proc/sys/net/ipv4/ip_forward
echo ready
exec sleep infinity
`

// startNamespaces creates the node's cgroup root, its namespaces (held by
// the "netns" process) and its network: a veth pair whose host end is a
// port of the nodes' bridge, the node's address on it, a default route to
// the host and a route to every other node's Pod range through that node.
func (n *Node) startNamespaces(ctx context.Context) error {
	for _, b := range nodeBinds {
		if err := os.MkdirAll(filepath.Join(n.Dir, b.source), 0o755); err != nil {
			return fmt.Errorf("cluster: node %s: %w", n.Name, err)
		}
	}
	if err := createNodeCgroups(n.Name); err != nil {
		return fmt.Errorf("cluster: node %s: %w", n.Name, err)
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return fmt.Errorf("cluster: node %s: %w", n.Name, err)
	}
	holder, err := n.c.startEnv(n.Name+"/netns", unshare,
		[]string{"--net", "--mount", "--uts", "--propagation=private", "--", "/bin/sh", "-c", holderScript},
		[]string{"KEMU_NODE=" + n.Name, "KEMU_NODE_DIR=" + n.Dir})
	if err != nil {
		return err
	}
	n.holder = holder
	logPath := filepath.Join(n.Dir, "netns.log")
	if err := poll(ctx, holder, 20*time.Millisecond, func() error {
		b, _ := os.ReadFile(logPath)
		if !strings.Contains(string(b), "\nready\n") {
			return errors.New("namespaces not set up yet")
		}
		return nil
	}); err != nil {
		return n.c.procErr(holder, "the namespaces of "+n.Name, err)
	}
	if err := n.setupNetwork(len(n.c.Nodes)); err != nil {
		return fmt.Errorf("cluster: node %s network: %w", n.Name, err)
	}
	return nil
}

// hostVeth is the host end of node i's veth pair.
func hostVeth(i int) string { return fmt.Sprintf("kemu-n%d", i+1) }

func (n *Node) setupNetwork(nodes int) error {
	br, err := netlink.LinkByName(nodesBridge)
	if err != nil {
		return err
	}
	ns, err := netns.GetFromPid(n.holder.pid())
	if err != nil {
		return fmt.Errorf("the holder's network namespace: %w", err)
	}
	defer ns.Close()
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: hostVeth(n.Index), MasterIndex: br.Attrs().Index},
		PeerName:      "eth0",
		PeerNamespace: netlink.NsFd(int(ns)),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("veth %s: %w", veth.Name, err)
	}
	if err := netlink.LinkSetUp(veth); err != nil {
		return err
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	eth0, err := h.LinkByName("eth0")
	if err != nil {
		return err
	}
	addr, err := netlink.ParseAddr(fmt.Sprintf("%s/%d", n.IP, bridgePrefix))
	if err != nil {
		return err
	}
	if err := h.AddrAdd(eth0, addr); err != nil {
		return fmt.Errorf("address %s: %w", addr, err)
	}
	if err := h.LinkSetUp(eth0); err != nil {
		return err
	}
	if err := h.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: net.ParseIP(bridgeIP)}); err != nil {
		return fmt.Errorf("default route: %w", err)
	}
	for j := range nodes {
		if j == n.Index {
			continue
		}
		_, dst, _ := net.ParseCIDR(nodePodCIDR(j))
		if err := h.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Dst: dst, Gw: net.ParseIP(nodeIP(j))}); err != nil {
			return fmt.Errorf("route %s: %w", dst, err)
		}
	}
	_, dst, _ := net.ParseCIDR(n.PodCIDR)
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: br.Attrs().Index, Dst: dst, Gw: net.ParseIP(n.IP)}); err != nil {
		return fmt.Errorf("host route %s: %w", dst, err)
	}
	return nil
}

// setupBridge creates the nodes' bridge with the host's address on it. The
// host routes nothing between its ports: node to node is layer 2, so the
// host's net.ipv4.ip_forward stays as it is.
func setupBridge() error {
	if _, err := netlink.LinkByName(nodesBridge); err == nil {
		return fmt.Errorf("cluster: network device %s exists: another test cluster runs (or ran without cleaning up) on this machine", nodesBridge)
	}
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: nodesBridge}}
	if err := netlink.LinkAdd(br); err != nil {
		return fmt.Errorf("cluster: bridge %s: %w", nodesBridge, err)
	}
	addr, err := netlink.ParseAddr(fmt.Sprintf("%s/%d", bridgeIP, bridgePrefix))
	if err != nil {
		return err
	}
	if err := netlink.AddrAdd(br, addr); err != nil {
		return fmt.Errorf("cluster: bridge %s address: %w", nodesBridge, err)
	}
	if err := netlink.LinkSetUp(br); err != nil {
		return fmt.Errorf("cluster: bridge %s up: %w", nodesBridge, err)
	}
	return nil
}

// deleteLinks removes the named network devices that exist (a veth with its
// peer; the bridge with the host routes through it). A node's veth would
// also go with its network namespace, but the kernel frees namespaces
// asynchronously.
func deleteLinks(names []string) error {
	var errs []error
	for _, name := range names {
		l, err := netlink.LinkByName(name)
		if err != nil {
			var nf netlink.LinkNotFoundError
			if !errors.As(err, &nf) {
				errs = append(errs, err)
			}
			continue
		}
		if err := netlink.LinkDel(l); err != nil {
			errs = append(errs, fmt.Errorf("deleting %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// nodeCgroupDirs are a node's cgroup root (its kubelet's --cgroup-root) in
// every mounted hierarchy.
func nodeCgroupDirs(node string) []string {
	var out []string
	for _, m := range cgroupMounts() {
		out = append(out, filepath.Join(m, node))
	}
	return out
}

// createNodeCgroups creates the node's cgroup root in every hierarchy (the
// kubelet refuses a --cgroup-root that does not exist); a cgroup v1 cpuset
// starts with the parent's CPUs and memory nodes.
func createNodeCgroups(node string) error {
	for _, d := range nodeCgroupDirs(node) {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("cgroup %s: %w", d, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			parent, err := os.ReadFile(filepath.Join(filepath.Dir(d), f))
			if err != nil {
				continue // not a v1 cpuset hierarchy
			}
			if cur, _ := os.ReadFile(filepath.Join(d, f)); strings.TrimSpace(string(cur)) != "" {
				continue
			}
			if err := os.WriteFile(filepath.Join(d, f), parent, 0o644); err != nil {
				return fmt.Errorf("cgroup %s: %s: %w", d, f, err)
			}
		}
	}
	return nil
}
