package storage

import (
	"encoding/binary"
	"fmt"
	"os"
)

// An empty qcow2 image, alone or over a backing file, written by the
// launcher instead of by an exec of `qemu-img create -f qcow2 [-b BASE -F
// FORMAT] [SIZE]` (6–7 ms of every start):
// qcow2 version 3 (QEMU's docs/interop/qcow2.txt), 64 KiB clusters, 16-bit
// refcounts, no snapshots, no feature bits — the layout qemu-img makes,
// without its optional feature-name table:
//
//	cluster 0: header, the backing format extension and the backing file
//	           name (an overlay only)
//	cluster 1: the refcount table (one entry: cluster 2)
//	cluster 2: the refcount block (clusters 0, 1, 2 and the L1 table's: 1)
//	cluster 3…: the L1 table, all zero: nothing allocated, every read goes
//	           to the backing file (or reads zeros)
//
// TestOverlayLikeQemuImg compares it with qemu-img's own, through qemu-img
// check and info, on every QEMU the suites run against.
const (
	qcow2ClusterBits  = 16
	qcow2ClusterSize  = 1 << qcow2ClusterBits
	qcow2HeaderLength = 112 // version 3 with the compression type byte (zlib) and padding
	qcow2RefcountBits = 16
	qcow2RefcountOrd  = 4 // log2(qcow2RefcountBits)
	// qcow2L2Coverage is what one L2 table (one cluster of 8-byte entries)
	// maps: the guest bytes behind one L1 entry.
	qcow2L2Coverage = qcow2ClusterSize * (qcow2ClusterSize / 8)
	// extBackingFormat is the backing file format name extension.
	extBackingFormat = 0xe2792aca
	// qcow2MaxL1Bytes is QEMU's limit on the L1 table (QCOW_MAX_L1_SIZE):
	// 2 PiB of guest disk with 64 KiB clusters.
	qcow2MaxL1Bytes = 32 << 20
	// maxBackingName is QEMU's limit on the backing file name.
	maxBackingName = 1023
	qcow2Magic     = 0x514649fb // "QFI\xfb"
)

// writeQCOW2 creates path (which must not exist) as an empty qcow2 of size
// bytes (rounded up to 512, as qemu-img does); with base, an overlay whose
// reads go to base, an image of format (raw or qcow2).
func writeQCOW2(path string, size int64, base, format string) error {
	if size <= 0 {
		return fmt.Errorf("qcow2 image %s: size %d", path, size)
	}
	if len(base) > maxBackingName {
		return fmt.Errorf("qcow2 image %s: the backing file name is %d bytes (at most %d)", path, len(base), maxBackingName)
	}
	if base != "" && format != FormatRaw && format != FormatQCOW2 {
		return fmt.Errorf("qcow2 image %s: backing format %q", path, format)
	}
	size = (size + 511) &^ 511
	l1Size := (size + qcow2L2Coverage - 1) / qcow2L2Coverage
	if l1Size*8 > qcow2MaxL1Bytes {
		return fmt.Errorf("qcow2 image %s: %d bytes is more than qcow2 holds with 64 KiB clusters (2 PiB)", path, size)
	}
	l1Clusters := (l1Size*8 + qcow2ClusterSize - 1) / qcow2ClusterSize
	clusters := 3 + l1Clusters // header, refcount table, refcount block, L1
	if clusters > qcow2ClusterSize*8/qcow2RefcountBits {
		return fmt.Errorf("qcow2 image %s: %d bytes need more than one refcount block", path, size)
	}

	// Cluster 0: header, extensions, backing file name.
	head := make([]byte, 0, qcow2ClusterSize)
	be := binary.BigEndian
	head = be.AppendUint32(head, qcow2Magic)
	head = be.AppendUint32(head, 3)                                   // version
	head = be.AppendUint64(head, 0)                                   // backing_file_offset, set below (0: none)
	head = be.AppendUint32(head, uint32(len(base)))                   // backing_file_size
	head = be.AppendUint32(head, qcow2ClusterBits)                    // cluster_bits
	head = be.AppendUint64(head, uint64(size))                        // size
	head = be.AppendUint32(head, 0)                                   // crypt_method
	head = be.AppendUint32(head, uint32(l1Size))                      // l1_size
	head = be.AppendUint64(head, 3*qcow2ClusterSize)                  // l1_table_offset
	head = be.AppendUint64(head, 1*qcow2ClusterSize)                  // refcount_table_offset
	head = be.AppendUint32(head, 1)                                   // refcount_table_clusters
	head = be.AppendUint32(head, 0)                                   // nb_snapshots
	head = be.AppendUint64(head, 0)                                   // snapshots_offset
	head = be.AppendUint64(head, 0)                                   // incompatible_features
	head = be.AppendUint64(head, 0)                                   // compatible_features
	head = be.AppendUint64(head, 0)                                   // autoclear_features
	head = be.AppendUint32(head, qcow2RefcountOrd)                    // refcount_order
	head = be.AppendUint32(head, qcow2HeaderLength)                   // header_length
	head = append(head, make([]byte, qcow2HeaderLength-len(head))...) // compression type 0 (zlib), padding
	if base != "" {
		head = be.AppendUint32(head, extBackingFormat)
		head = be.AppendUint32(head, uint32(len(format)))
		head = append(head, format...)
		head = append(head, make([]byte, pad8(len(format)))...)
	}
	head = be.AppendUint64(head, 0) // end of the extensions: type 0, length 0
	if base != "" {
		be.PutUint64(head[8:], uint64(len(head)))
		head = append(head, base...)
	}
	if len(head) > qcow2ClusterSize {
		return fmt.Errorf("qcow2 image %s: the header does not fit its cluster", path)
	}

	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	write := func(off int64, b []byte) {
		if err == nil {
			_, err = f.WriteAt(b, off)
		}
	}
	write(0, head)
	rt := make([]byte, 8)
	be.PutUint64(rt, 2*qcow2ClusterSize) // the refcount block
	write(1*qcow2ClusterSize, rt)
	rb := make([]byte, clusters*qcow2RefcountBits/8)
	for i := range clusters {
		be.PutUint16(rb[i*2:], 1)
	}
	write(2*qcow2ClusterSize, rb)
	if err == nil {
		// The L1 table: zeros up to its end (the file's end, as qemu-img).
		err = f.Truncate(3*qcow2ClusterSize + l1Size*8)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("qcow2 image %s: %w", path, err)
	}
	return nil
}

func pad8(n int) int { return (8 - n%8) % 8 }

// extDataFile is the external data file name extension.
const extDataFile = 0x44415441

// qcow2IncompatDataFile is the incompatible feature bit of an external data
// file.
const qcow2IncompatDataFile = 1 << 2

// probeImage reads what kemu needs of a disk image from its header, as
// QEMU's own probe decides the format: qcow2 by its magic (with its
// virtual size, backing file and external data file), anything else raw
// (its size the file's, in whole 512-byte sectors). It is the fast path of a start; qemu-img info,
// which also knows every other format, checks the result while QEMU
// starts (Prepared.Verify).
func probeImage(path string) (*imageInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	head := make([]byte, 104)
	n, err := f.ReadAt(head, 0)
	if n < 4 || binary.BigEndian.Uint32(head) != qcow2Magic {
		// QEMU's raw driver rounds a file up to whole sectors.
		return &imageInfo{Filename: path, Format: FormatRaw, VirtualSize: roundUp512(st.Size())}, nil
	}
	if n < 72 {
		return nil, fmt.Errorf("qcow2 header: %d bytes: %v", n, err)
	}
	be := binary.BigEndian
	info := &imageInfo{Filename: path, Format: FormatQCOW2, VirtualSize: int64(be.Uint64(head[24:]))}
	version := be.Uint32(head[4:])
	if version != 2 && version != 3 {
		return nil, fmt.Errorf("qcow2 version %d", version)
	}
	clusterBits := be.Uint32(head[20:])
	if clusterBits < 9 || clusterBits > 21 {
		return nil, fmt.Errorf("qcow2 cluster_bits %d", clusterBits)
	}
	// The header, its extensions and the backing file name are all in the
	// first cluster.
	cluster := make([]byte, 1<<clusterBits)
	if n, err = f.ReadAt(cluster, 0); n < 72 {
		return nil, fmt.Errorf("qcow2 header: %w", err)
	}
	cluster = cluster[:n]
	if off, size := be.Uint64(head[8:]), uint64(be.Uint32(head[16:])); off != 0 {
		info.BackingFilename = fmt.Sprintf("(%d bytes at offset %d)", size, off)
		if off < uint64(len(cluster)) && size <= maxBackingName && off+size <= uint64(len(cluster)) && size > 0 {
			info.BackingFilename = string(cluster[off : off+size])
		}
	}
	extStart := uint64(72)
	if version == 3 {
		if n < 104 {
			return nil, fmt.Errorf("qcow2 version 3 header: %d bytes", n)
		}
		if be.Uint64(head[72:])&qcow2IncompatDataFile != 0 {
			info.FormatSpecific.Data.DataFile = "(unnamed)"
		}
		extStart = uint64(be.Uint32(head[100:]))
	}
	for off := extStart; off+8 <= uint64(len(cluster)); {
		typ, length := be.Uint32(cluster[off:]), uint64(be.Uint32(cluster[off+4:]))
		if typ == 0 {
			break
		}
		data := off + 8
		if data+length > uint64(len(cluster)) {
			return nil, fmt.Errorf("qcow2 header extension %#x past the first cluster", typ)
		}
		if typ == extDataFile {
			info.FormatSpecific.Data.DataFile = string(cluster[data : data+length])
		}
		off = data + length + uint64(pad8(int(length)))
	}
	return info, nil
}
