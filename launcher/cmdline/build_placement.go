package cmdline

import (
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Placement is where the launcher placed the VM on this host
// (launcher/placement.go): the hugetlbfs directory of the guest's memory
// and the guest NUMA nodes of numa.guestMappingPassthrough.
type Placement struct {
	// Hugepages is a directory on a hugetlbfs mount of the VMI's page
	// size, writable by QEMU; required by spec.domain.memory.hugepages.
	Hugepages string
	// NUMA are the guest's NUMA nodes, in order; required by
	// spec.domain.cpu.numa.guestMappingPassthrough.
	NUMA []NUMANode
}

// NUMANode is one guest NUMA node: the vCPUs (indexes) pinned to CPUs of
// host NUMA node HostNode, and its memory bound to that host node.
type NUMANode struct {
	HostNode int
	VCPUs    []int
}

// HugeMemory is guest memory in a file on hugetlbfs: -object
// memory-backend-file,mem-path=Dir,prealloc=on (every page taken at start:
// a Pod short of hugepages fails then, not when the guest touches them),
// share=on when a vhost-user daemon (virtiofsd) maps it; bound to
// HostNode (policy=bind) when HostNode ≥ 0.
type HugeMemory struct {
	ID       string
	MiB      uint64
	Dir      string
	Share    bool
	HostNode int
}

// Args implements Device.
func (m HugeMemory) Args() ([]string, error) {
	if m.MiB < 1 {
		return nil, fmt.Errorf("-object memory-backend-file: size must be at least 1 MiB")
	}
	if !idPattern.MatchString(m.ID) {
		return nil, fmt.Errorf("-object memory-backend-file: bad id %q", m.ID)
	}
	if m.Dir == "" || isHelp(m.Dir) {
		return nil, fmt.Errorf("-object memory-backend-file: no hugetlbfs directory")
	}
	o := newOpts("memory-backend-file").add("id", m.ID).add("size", fmt.Sprintf("%dM", m.MiB)).
		add("mem-path", m.Dir).add("prealloc", "on").on("share", m.Share)
	if !m.Share {
		o.add("share", "off")
	}
	if m.HostNode >= 0 {
		o.add("host-nodes", strconv.Itoa(m.HostNode)).add("policy", "bind")
	}
	return o.arg("-object")
}

// NUMANodeArg is -numa node,nodeid=ID,cpus=…,memdev=MemDev.
type NUMANodeArg struct {
	ID     int
	CPUs   []int
	MemDev string
}

// Args implements Device.
func (n NUMANodeArg) Args() ([]string, error) {
	if len(n.CPUs) == 0 {
		return nil, fmt.Errorf("-numa node %d: no vCPUs", n.ID)
	}
	if !idPattern.MatchString(n.MemDev) {
		return nil, fmt.Errorf("-numa node %d: bad memdev %q", n.ID, n.MemDev)
	}
	o := newOpts("node").add("nodeid", strconv.Itoa(n.ID))
	for _, c := range n.CPUs {
		o.add("cpus", strconv.Itoa(c))
	}
	return o.add("memdev", n.MemDev).arg("-numa")
}

// NUMAMemoryID is the memory backend of guest NUMA node i.
func NUMAMemoryID(i int) string { return fmt.Sprintf("mem-node%d", i) }

// machineMemoryBackend is the -machine memory-backend of the VMI: the one
// guest memory object when filesystems share it or hugepages back it, none
// with guest NUMA nodes (each has its own memdev).
func (b *builder) machineMemoryBackend() string {
	d := &b.vmi.Spec.Domain
	hp := d.Memory != nil && d.Memory.Hugepages != nil
	if hp && len(b.in.Placement.NUMA) > 0 {
		return ""
	}
	if hp || len(d.Devices.Filesystems) > 0 {
		return GuestMemoryID
	}
	return ""
}

// guestMemory adds the guest memory's backends: memfd shared with
// virtiofsd, a hugetlbfs file, or one hugetlbfs file per guest NUMA node
// (its share of the pages, in proportion to its vCPUs, the last node
// taking the rest) with -numa node.
func (b *builder) guestMemory(mib uint64) {
	d := &b.vmi.Spec.Domain
	share := len(d.Devices.Filesystems) > 0
	if d.Memory.Hugepages == nil {
		if share {
			b.add("spec.domain.devices.filesystems", SharedMemory{ID: GuestMemoryID, MiB: mib})
		}
		if d.CPU.NUMA != nil && d.CPU.NUMA.GuestMappingPassthrough != nil {
			b.fail("spec.domain.cpu.numa.guestMappingPassthrough", "needs spec.domain.memory.hugepages")
		}
		return
	}
	const hpPath = "spec.domain.memory.hugepages"
	if b.in.Placement.Hugepages == "" {
		b.fail(hpPath, "no hugetlbfs directory for the guest's memory (Placement.Hugepages)")
		return
	}
	dir := b.val(hpPath, b.in.Placement.Hugepages)
	numa := b.in.Placement.NUMA
	if len(numa) == 0 {
		if d.CPU.NUMA != nil && d.CPU.NUMA.GuestMappingPassthrough != nil {
			b.fail("spec.domain.cpu.numa.guestMappingPassthrough", "no guest NUMA nodes placed (Placement.NUMA)")
			return
		}
		b.add(hpPath, HugeMemory{ID: GuestMemoryID, MiB: mib, Dir: dir, Share: share, HostNode: -1})
		return
	}
	pageSize, err := resource.ParseQuantity(d.Memory.Hugepages.PageSize)
	pageMiB := uint64(pageSize.Value() >> 20)
	if err != nil || pageMiB == 0 || mib%pageMiB != 0 {
		b.fail(hpPath+".pageSize", "%q: guest memory %d MiB is not a whole number of such pages", d.Memory.Hugepages.PageSize, mib)
		return
	}
	pages := mib / pageMiB
	total := 0
	for _, n := range numa {
		total += len(n.VCPUs)
	}
	var given uint64
	const numaPath = "spec.domain.cpu.numa.guestMappingPassthrough"
	for i, n := range numa {
		share := pages * uint64(len(n.VCPUs)) / uint64(max(total, 1))
		if i == len(numa)-1 {
			share = pages - given
		}
		if share == 0 {
			b.fail(numaPath, "guest NUMA node %d (host node %d) would get no memory: %d pages of %s for %d nodes",
				i, n.HostNode, pages, d.Memory.Hugepages.PageSize, len(numa))
			return
		}
		given += share
		id := NUMAMemoryID(i)
		b.add(numaPath, HugeMemory{ID: id, MiB: share * pageMiB, Dir: dir, Share: len(d.Devices.Filesystems) > 0, HostNode: n.HostNode},
			NUMANodeArg{ID: i, CPUs: n.VCPUs, MemDev: id})
	}
}
