package netsetup

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// natTable is the nftables table of one masquerade interface (family ip):
//
//	table ip kemu-eth0 {
//	  chain prerouting  { type nat hook prerouting priority dstnat;
//	    iifname "eth0" ip daddr <pod IP> meta l4proto tcp [tcp dport P] counter dnat to 10.0.2.2 }
//	  chain output      { type nat hook output priority dstnat;
//	    ip daddr <pod IP> meta l4proto tcp [tcp dport P] counter dnat to 10.0.2.2 }
//	  chain postrouting { type nat hook postrouting priority srcnat;
//	    ip saddr 10.0.2.0/24 oifname "eth0" counter masquerade }
//	}
//
// with one dnat rule per pod IP and protocol (tcp, udp) when every port is
// forwarded, or per pod IP and listed port.
type natTable struct {
	Name      string
	PodIface  string
	PodIPs    []netip.Addr // IPv4
	GuestIP   netip.Addr
	VMNetwork netip.Prefix
	Ports     []Port // empty = all TCP and UDP ports
}

// Chain names.
const (
	chainPrerouting  = "prerouting"
	chainOutput      = "output"
	chainPostrouting = "postrouting"
)

// rules returns each chain's rules, in order.
func (t natTable) rules() map[string][][]expr.Any {
	var pre, out [][]expr.Any
	for _, ip := range t.PodIPs {
		for _, m := range t.portMatches() {
			dnat := append(append(ipDaddr(ip), m...), counterAndDNAT(t.GuestIP)...)
			pre = append(pre, append(ifaceMatch(unix.NFT_META_IIFNAME, t.PodIface), dnat...))
			out = append(out, dnat)
		}
	}
	post := [][]expr.Any{append(append(ipSaddrIn(t.VMNetwork), ifaceMatch(unix.NFT_META_OIFNAME, t.PodIface)...),
		&expr.Counter{}, &expr.Masq{})}
	return map[string][][]expr.Any{chainPrerouting: pre, chainOutput: out, chainPostrouting: post}
}

// portMatches: the l4 matches of the dnat rules.
func (t natTable) portMatches() [][]expr.Any {
	if len(t.Ports) == 0 {
		return [][]expr.Any{l4proto(unix.IPPROTO_TCP), l4proto(unix.IPPROTO_UDP)}
	}
	var ms [][]expr.Any
	for _, p := range t.Ports {
		proto := byte(unix.IPPROTO_TCP)
		if p.Protocol == "udp" {
			proto = unix.IPPROTO_UDP
		}
		ms = append(ms, append(l4proto(proto),
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.BigEndian.AppendUint16(nil, p.Port)}))
	}
	return ms
}

func ifaceMatch(key expr.MetaKey, name string) []expr.Any {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return []expr.Any{&expr.Meta{Key: key, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b}}
}

func ipDaddr(ip netip.Addr) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ip.AsSlice()},
	}
}

func ipSaddrIn(p netip.Prefix) []expr.Any {
	mask := make([]byte, 4)
	binary.BigEndian.PutUint32(mask, ^uint32(0)<<(32-p.Bits()))
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: p.Masked().Addr().AsSlice()},
	}
}

func l4proto(proto byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}}}
}

func counterAndDNAT(to netip.Addr) []expr.Any {
	return []expr.Any{
		&expr.Counter{},
		&expr.Immediate{Register: 1, Data: to.AsSlice()},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1},
	}
}

func nftConn(ns netns.NsHandle) (*nftables.Conn, error) {
	var opts []nftables.ConnOption
	if !isOwnNetNS(ns) {
		opts = append(opts, nftables.WithNetNSFd(int(ns)))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	return c, nil
}

func hasTable(c *nftables.Conn, name string) (bool, error) {
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return false, fmt.Errorf("listing nftables tables: %w", err)
	}
	for _, t := range tables {
		if t.Name == name {
			return true, nil
		}
	}
	return false, nil
}

// apply replaces the table in one transaction: a rerun leaves exactly one
// table with exactly these rules.
func (t natTable) apply(ns netns.NsHandle) error {
	c, err := nftConn(ns)
	if err != nil {
		return err
	}
	exists, err := hasTable(c, t.Name)
	if err != nil {
		return err
	}
	table := &nftables.Table{Name: t.Name, Family: nftables.TableFamilyIPv4}
	if exists {
		c.DelTable(table)
	}
	c.AddTable(table)
	chains := map[string]*nftables.Chain{}
	for _, ch := range []struct {
		name string
		hook *nftables.ChainHook
		prio *nftables.ChainPriority
	}{
		{chainPrerouting, nftables.ChainHookPrerouting, nftables.ChainPriorityNATDest},
		{chainOutput, nftables.ChainHookOutput, nftables.ChainPriorityNATDest},
		{chainPostrouting, nftables.ChainHookPostrouting, nftables.ChainPriorityNATSource},
	} {
		chains[ch.name] = c.AddChain(&nftables.Chain{Name: ch.name, Table: table, Type: nftables.ChainTypeNAT, Hooknum: ch.hook, Priority: ch.prio})
	}
	for name, rules := range t.rules() {
		for _, r := range rules {
			c.AddRule(&nftables.Rule{Table: table, Chain: chains[name], Exprs: r})
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables table %s: %w", t.Name, err)
	}
	return nil
}

// deleteTable removes the table if it is there.
func deleteTable(ns netns.NsHandle, name string) error {
	c, err := nftConn(ns)
	if err != nil {
		return err
	}
	exists, err := hasTable(c, name)
	if err != nil || !exists {
		return err
	}
	c.DelTable(&nftables.Table{Name: name, Family: nftables.TableFamilyIPv4})
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("deleting nftables table %s: %w", name, err)
	}
	return nil
}
