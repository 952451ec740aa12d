package storage

import (
	"os"
	"syscall"
)

// DirectIO says whether path can be opened with O_DIRECT, as QEMU opens a
// disk with cache none (cache.direct=on): false when its file system
// refuses O_DIRECT (EINVAL: tmpfs before Linux 6.6, some FUSE and network
// file systems) or when it cannot be opened at all. KubeVirt's launcher
// asks the same question (its DirectIOChecker) to choose a disk's cache
// mode.
func DirectIO(path string) bool {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

// Preallocated says whether a regular file has all its size bytes
// allocated (KubeVirt: an image whose actual size is at least its virtual
// size): a raw image written or fallocated in full, not a sparse one.
// Block devices are not files; they count as preallocated for the io
// default elsewhere.
func Preallocated(path string, size int64) bool {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return false
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return false
	}
	return size > 0 && st.Blocks*512 >= size
}
