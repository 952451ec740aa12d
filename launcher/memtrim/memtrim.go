// Package memtrim gives back, once a VM runs, the memory a launcher process
// touched only to set the VM up.
//
// Setting a VM up runs most of the launcher's code once (decoding and
// validating the VMI, images, storage, the network, cgroups, the QEMU
// command line), and every page of the executable it touched stays mapped
// in the process — with the kernel's fault-around, most of the binary: a
// kemu-launcher with a running VM had 15.8 MiB of its 20.5 MiB executable
// resident, of which its steady life (QMP events, the console pump, the
// command server) touched 0.3 MiB in 20 s. Release drops those mappings'
// pages from the process (they stay in the page cache, shared with every
// other launcher of the same image on the node, and come back on the next
// touch) and returns the Go heap's free pages to the kernel, so that the
// launcher's resident set is what running the VM needs (docs/benchmarks.md).
package memtrim

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Mapping is one mapping of /proc/self/smaps that Release may drop.
type Mapping struct {
	Start, End uintptr
	// RSS is how much of it was resident, in bytes.
	RSS int64
}

// Result says what Release gave back.
type Result struct {
	// Mappings are the executable's mappings whose pages were dropped.
	Mappings []Mapping
	// FileBytes is how much of them was resident before.
	FileBytes int64
}

// Release returns the Go heap's free pages to the kernel and drops the
// resident pages of the executable's read-only, private file mappings
// (text, read-only data, the function tables) that hold no private copy of
// a page: such a page is read back from the file on its next touch, so
// dropping it changes nothing but the resident set. A mapping with a
// private copy (a relocated read-only segment of a position-independent
// build) is left alone. Call it once the VM runs.
func Release() (Result, error) {
	debug.FreeOSMemory()
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return Result{}, fmt.Errorf("memtrim: %w", err)
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return Result{}, fmt.Errorf("memtrim: %w", err)
	}
	maps, err := Droppable(smaps, exe)
	if err != nil {
		return Result{}, err
	}
	var r Result
	for _, m := range maps {
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, m.Start, m.End-m.Start, unix.MADV_DONTNEED); errno != 0 {
			return r, fmt.Errorf("memtrim: madvise %#x-%#x: %w", m.Start, m.End, errno)
		}
		r.Mappings = append(r.Mappings, m)
		r.FileBytes += m.RSS
	}
	return r, nil
}

// Droppable reads smaps (the format of /proc/<pid>/smaps) and returns the
// mappings of the file path that are readable, not writable, private and
// hold no anonymous (copied-on-write) page.
func Droppable(smaps []byte, path string) ([]Mapping, error) {
	var (
		out  []Mapping
		cur  *Mapping
		anon int64
	)
	flush := func() {
		if cur != nil && anon == 0 && cur.RSS > 0 {
			out = append(out, *cur)
		}
		cur, anon = nil, 0
	}
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if head, ok := mappingHeader(f); ok {
			flush()
			if head.path == path && head.perms[0] == 'r' && head.perms[1] == '-' && head.perms[3] == 'p' {
				cur = &Mapping{Start: head.start, End: head.end}
			}
			continue
		}
		if cur == nil || len(f) < 2 {
			continue
		}
		switch f[0] {
		case "Rss:", "Anonymous:":
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("memtrim: smaps line %q: %w", line, err)
			}
			if f[0] == "Rss:" {
				cur.RSS = kb << 10
			} else {
				anon = kb << 10
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("memtrim: reading smaps: %w", err)
	}
	flush()
	return out, nil
}

type header struct {
	start, end uintptr
	perms      string
	path       string
}

// mappingHeader parses "start-end perms offset dev inode [path]"; a path
// may hold spaces (" (deleted)" too), so it is the rest of the line.
func mappingHeader(f []string) (header, bool) {
	if len(f) < 5 || len(f[1]) != 4 || !strings.Contains(f[0], "-") || strings.HasSuffix(f[0], ":") {
		return header{}, false
	}
	lo, hi, ok := strings.Cut(f[0], "-")
	if !ok {
		return header{}, false
	}
	start, err1 := strconv.ParseUint(lo, 16, 64)
	end, err2 := strconv.ParseUint(hi, 16, 64)
	if err1 != nil || err2 != nil || end <= start {
		return header{}, false
	}
	h := header{start: uintptr(start), end: uintptr(end), perms: f[1]}
	if len(f) > 5 {
		h.path = strings.Join(f[5:], " ")
	}
	return h, true
}
