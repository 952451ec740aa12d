package v1alpha1

// KubeVirt's disk tuning rules (the choices its launcher makes for cache
// and io), decided here once: launcher/cmdline renders them,
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
