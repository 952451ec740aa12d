package storage

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteQCOW2Refuses(t *testing.T) {
	dir := t.TempDir()
	exists := filepath.Join(dir, "exists.qcow2")
	if err := os.WriteFile(exists, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path string
		size       int64
		base, fmt  string
		want       string
	}{
		{name: "no size", size: 0, want: "size 0"},
		{name: "backing name too long", size: 1 << 20, base: "/" + strings.Repeat("x", 1023), fmt: FormatRaw, want: "at most 1023"},
		{name: "backing format", size: 1 << 20, base: "/base.vmdk", fmt: "vmdk", want: `backing format "vmdk"`},
		{name: "beyond 2 PiB", size: 3 << 50, want: "2 PiB"},
		{name: "existing file", path: exists, size: 1 << 20, want: "exists"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.path
			if p == "" {
				p = filepath.Join(t.TempDir(), "x.qcow2")
			}
			err := writeQCOW2(p, tc.size, tc.base, tc.fmt)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("writeQCOW2 = %v, want an error with %q", err, tc.want)
			}
			if tc.path == "" {
				if _, err := os.Stat(p); !os.IsNotExist(err) {
					t.Errorf("%s left behind: %v", p, err)
				}
			}
		})
	}
}

// The header's fields where qcow2 version 3 puts them.
func TestWriteQCOW2Header(t *testing.T) {
	p := filepath.Join(t.TempDir(), "o.qcow2")
	base := "/var/lib/kemu/images/x/disk.img"
	if err := writeQCOW2(p, 1000, base, FormatRaw); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	be := binary.BigEndian
	off := be.Uint64(b[8:])
	for _, f := range []struct {
		name      string
		got, want uint64
	}{
		{"magic", uint64(be.Uint32(b[0:])), qcow2Magic},
		{"version", uint64(be.Uint32(b[4:])), 3},
		{"backing_file_size", uint64(be.Uint32(b[16:])), uint64(len(base))},
		{"cluster_bits", uint64(be.Uint32(b[20:])), 16},
		{"size (rounded to 512)", be.Uint64(b[24:]), 1024},
		{"l1_size", uint64(be.Uint32(b[36:])), 1},
		{"l1_table_offset", be.Uint64(b[40:]), 3 << 16},
		{"refcount_table_offset", be.Uint64(b[48:]), 1 << 16},
		{"refcount_order", uint64(be.Uint32(b[96:])), 4},
		{"header_length", uint64(be.Uint32(b[100:])), 112},
		{"backing format extension", uint64(be.Uint32(b[112:])), extBackingFormat},
		{"refcount table entry", be.Uint64(b[1<<16:]), 2 << 16},
		{"file size", uint64(len(b)), 3<<16 + 8},
	} {
		if f.got != f.want {
			t.Errorf("%s = %#x, want %#x", f.name, f.got, f.want)
		}
	}
	if got := string(b[off : off+uint64(len(base))]); got != base {
		t.Errorf("backing file name %q", got)
	}
	if want := bytes.Repeat([]byte{0, 1}, 4); !bytes.Equal(b[2<<16:2<<16+8], want) {
		t.Errorf("refcounts %x, want %x", b[2<<16:2<<16+8], want)
	}
}

// Hostile qcow2 headers: refused, or read without going past what the file
// holds; never a panic.
func TestProbeImageHostile(t *testing.T) {
	be := binary.BigEndian
	header := func(mod func(h []byte)) []byte {
		h := make([]byte, 1<<16)
		be.PutUint32(h[0:], qcow2Magic)
		be.PutUint32(h[4:], 3)
		be.PutUint32(h[20:], 16)
		be.PutUint64(h[24:], 1<<20)
		be.PutUint32(h[100:], 112)
		mod(h)
		return h
	}
	for _, tc := range []struct {
		name string
		data []byte
		want string // error text; "" = accepted
		back string // the backing file it must report
	}{
		{name: "three bytes of magic", data: []byte("QFI"), want: ""},
		{name: "magic only", data: []byte("QFI\xfb"), want: "qcow2 header"},
		{name: "version 4", data: header(func(h []byte) { be.PutUint32(h[4:], 4) }), want: "qcow2 version 4"},
		{name: "huge clusters", data: header(func(h []byte) { be.PutUint32(h[20:], 40) }), want: "cluster_bits 40"},
		{name: "backing name past the file", data: header(func(h []byte) { be.PutUint64(h[8:], 1<<40); be.PutUint32(h[16:], 10) }),
			back: "(10 bytes at offset 1099511627776)"},
		{name: "extension past the cluster", data: header(func(h []byte) { be.PutUint32(h[112:], 1); be.PutUint32(h[116:], 1<<20) }),
			want: "past the first cluster"},
		{name: "data file bit", data: header(func(h []byte) { be.PutUint64(h[72:], qcow2IncompatDataFile) })},
		{name: "header length past the cluster", data: header(func(h []byte) { be.PutUint32(h[100:], 1<<30) })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "img")
			if err := os.WriteFile(p, tc.data, 0o644); err != nil {
				t.Fatal(err)
			}
			info, err := probeImage(p)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("probeImage = %+v, %v; want an error with %q", info, err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if info.BackingFilename != tc.back {
				t.Errorf("backing file %q, want %q", info.BackingFilename, tc.back)
			}
			if tc.name == "data file bit" && info.checkBase() == nil {
				t.Error("an image with the external data file bit passed checkBase")
			}
		})
	}
}
