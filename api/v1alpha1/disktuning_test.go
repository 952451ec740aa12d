package v1alpha1

import "testing"

// TestDiskCacheAndIO: KubeVirt's defaults for a disk's cache and io modes,
// which depend on the node's file (O_DIRECT, preallocation, block device).
func TestDiskCacheAndIO(t *testing.T) {
	tests := []struct {
		name                          string
		disk                          Disk
		directIO, block, preallocated bool
		cache                         DriverCache
		io                            DriverIO
	}{
		{name: "O_DIRECT: none, sparse file: threads", directIO: true, cache: CacheNone, io: IOThreads},
		{name: "O_DIRECT, preallocated file: none, native", directIO: true, preallocated: true, cache: CacheNone, io: IONative},
		{name: "O_DIRECT, block device: none, native", directIO: true, block: true, cache: CacheNone, io: IONative},
		{name: "no O_DIRECT: writethrough, threads", preallocated: true, cache: CacheWriteThrough, io: IOThreads},
		{name: "no O_DIRECT, block device: writethrough, threads", block: true, cache: CacheWriteThrough, io: IOThreads},
		{name: "cache asked for wins", disk: Disk{Cache: CacheWriteBack}, directIO: true, block: true, cache: CacheWriteBack, io: IOThreads},
		{name: "writethrough asked for", disk: Disk{Cache: CacheWriteThrough}, directIO: true, cache: CacheWriteThrough, io: IOThreads},
		{name: "none asked for without O_DIRECT stays none (the launcher refuses it)", disk: Disk{Cache: CacheNone}, cache: CacheNone, io: IOThreads},
		{name: "shareable: none", disk: Disk{Shareable: ptr(true)}, cache: CacheNone, io: IOThreads},
		{name: "shareable without O_DIRECT: still none", disk: Disk{Shareable: ptr(true)}, block: true, cache: CacheNone, io: IONative},
		{name: "not shareable: the node decides", disk: Disk{Shareable: ptr(false)}, cache: CacheWriteThrough, io: IOThreads},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cache := DiskCache(&tt.disk, tt.directIO)
			io := DefaultDiskIO(cache, tt.block, tt.preallocated)
			if cache != tt.cache || io != tt.io {
				t.Errorf("cache %s, io %s; want %s, %s", cache, io, tt.cache, tt.io)
			}
		})
	}
}
