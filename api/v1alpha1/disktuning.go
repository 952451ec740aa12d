package v1alpha1

import corev1 "k8s.io/api/core/v1"

// KubeVirt's disk tuning rules (the choices its launcher makes for cache,
// io and iothreads), decided here once: launcher/cmdline renders them,
// docs/api.md describes them. They depend on the node (can the file be
// opened with O_DIRECT, is it preallocated), so they are not written into
// the stored VMI.

// DefaultDiskCache is the cache mode of a disk that names none: none when
// its file (and the file under its overlay) can be opened with O_DIRECT,
// else writethrough (KubeVirt's SetDriverCacheMode). A shareable disk names
// none for itself (ShareableDiskCache) whatever the node.
func DefaultDiskCache(directIO bool) DriverCache {
	if directIO {
		return CacheNone
	}
	return CacheWriteThrough
}

// ShareableDiskCache is the only cache mode of a shareable disk, and its
// default: the guests sharing it must see each other's writes.
const ShareableDiskCache = CacheNone

// DiskCache is the cache mode a disk runs with: its cache, else
// ShareableDiskCache for a shareable disk, else DefaultDiskCache.
func DiskCache(d *Disk, directIO bool) DriverCache {
	switch {
	case d.Cache != "":
		return d.Cache
	case d.Shareable != nil && *d.Shareable:
		return ShareableDiskCache
	}
	return DefaultDiskCache(directIO)
}

// DefaultDiskIO is the I/O mode of a disk that names none: native (Linux
// AIO, which needs O_DIRECT) for a block device or a preallocated file
// with cache none, else threads (KubeVirt's SetOptimalIOMode leaves it to
// QEMU, whose default is threads).
func DefaultDiskIO(cache DriverCache, block, preallocated bool) DriverIO {
	if cache == CacheNone && (block || preallocated) {
		return IONative
	}
	return IOThreads
}

// IOThreadsPerCPU is the auto policy's pool size per requested CPU.
const IOThreadsPerCPU = 2

// IOThreadPlan is which QEMU iothreads a VMI has and which disk uses which.
// Threads are numbered 1 … Threads.
//
// +k8s:deepcopy-gen=false
type IOThreadPlan struct {
	Threads int
	// Disks maps each virtio disk (by name) to its iothread. Disks on
	// other buses get none (validation refuses dedicatedIOThread there).
	Disks map[string]int
}

// DiskHasIOThread says whether a disk is attached through an iothread
// when the VMI has any: a virtio hard disk.
func DiskHasIOThread(d *Disk) bool { return d.Disk != nil && d.Disk.Bus == DiskBusVirtio }

// PlanIOThreads applies KubeVirt's rules (its converter's iothreads
// package). A VMI has iothreads when it has an ioThreadsPolicy or a disk
// with dedicatedIOThread. Every disk (of any bus) without a dedicated
// iothread counts towards the shared pool, every disk with one needs one of
// its own; the pool is limited to 1 (shared, or no policy) or to
// IOThreadsPerCPU × the requested CPUs (auto: resources.requests.cpu, else
// limits.cpu, rounded up, else 1), less the dedicated ones but at least 1.
// Shared threads come first (1 … pool), virtio disks without a dedicated
// one take them round robin in disk order; dedicated ones follow, one per
// disk in disk order.
func PlanIOThreads(spec *VirtualMachineInstanceSpec) IOThreadPlan {
	d := &spec.Domain
	dedicated, shared := 0, 0
	for i := range d.Devices.Disks {
		if dd := d.Devices.Disks[i].DedicatedIOThread; dd != nil && *dd {
			dedicated++
		} else {
			shared++
		}
	}
	if d.IOThreadsPolicy == nil && dedicated == 0 {
		return IOThreadPlan{}
	}
	limit := 1
	if p := d.IOThreadsPolicy; p != nil && *p == IOThreadsPolicyAuto {
		cpus := int64(1)
		if q, ok := d.Resources.Requests[corev1.ResourceCPU]; ok {
			cpus = q.Value()
		} else if q, ok := d.Resources.Limits[corev1.ResourceCPU]; ok {
			cpus = q.Value()
		}
		limit = int(min(max(cpus, 0), 1<<20)) * IOThreadsPerCPU
	}
	if shared+dedicated > limit {
		shared = max(limit-dedicated, 1)
	}
	plan := IOThreadPlan{Threads: shared + dedicated, Disks: map[string]int{}}
	nextShared, nextDedicated := 1, shared+1
	for i := range d.Devices.Disks {
		disk := &d.Devices.Disks[i]
		if !DiskHasIOThread(disk) {
			continue
		}
		if disk.DedicatedIOThread != nil && *disk.DedicatedIOThread {
			plan.Disks[disk.Name] = nextDedicated
			nextDedicated++
			continue
		}
		plan.Disks[disk.Name] = nextShared
		nextShared = nextShared%shared + 1
	}
	return plan
}

// BlockQueues is the number of queues of each virtio-blk disk with
// blockMultiQueue (one per vCPU, KubeVirt's rule), 0 without it (QEMU's
// default).
func BlockQueues(d *DomainSpec) int {
	if d.Devices.BlockMultiQueue == nil || !*d.Devices.BlockMultiQueue {
		return 0
	}
	n := 1
	if c := d.CPU; c != nil {
		n = int(max(c.Sockets, 1)) * int(max(c.Cores, 1)) * int(max(c.Threads, 1))
	}
	return n
}
