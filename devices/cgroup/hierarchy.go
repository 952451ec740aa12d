// Package cgroup confines a process tree to a device allowlist on the cgroup v2
// hierarchy: a child cgroup of the caller's own cgroup with a BPF_CGROUP_DEVICE
// program that allows exactly the listed devices (everything else: EPERM).
//
// It works on a pure cgroup v2 host (cgroup2 at /sys/fs/cgroup) and on a hybrid
// host (cgroup2 at /sys/fs/cgroup/unified, any controllers); device control on
// cgroup v2 is a BPF program and needs no controller to be enabled.
package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrNoCgroup2 is returned when no cgroup v2 hierarchy is mounted, or the process
// has no place in it.
var ErrNoCgroup2 = errors.New("no cgroup v2 hierarchy mounted (need cgroup2 at /sys/fs/cgroup or /sys/fs/cgroup/unified)")

// Mount is a cgroup2 mount from /proc/self/mountinfo.
type Mount struct {
	// Mountpoint is where the hierarchy is mounted, e.g. /sys/fs/cgroup/unified.
	Mountpoint string
	// Root is the cgroup (in the hierarchy) that is mounted there, usually "/".
	Root string
	// ReadOnly: mounted ro (containers on a cgroup v2 host get such a mount).
	ReadOnly bool
}

// Hierarchy is the cgroup2 hierarchy and the calling process's cgroup in it.
type Hierarchy struct {
	Mount
	// Cgroup is the process's cgroup path as /proc/self/cgroup shows it ("0::/path").
	Cgroup string
	// Dir is the directory of that cgroup on the filesystem.
	Dir string
}

// Self finds the cgroup2 hierarchy and the calling process's cgroup directory.
func Self() (*Hierarchy, error) {
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer mi.Close()
	mounts, err := ParseMountinfo(mi)
	if err != nil {
		return nil, err
	}
	cg, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	defer cg.Close()
	p, err := ParseProcCgroup(cg)
	if err != nil {
		return nil, err
	}
	return Resolve(mounts, p)
}

// Resolve picks the cgroup2 mount that contains cgroup path p (as read from
// /proc/self/cgroup), a writable one before a read-only one, and returns
// the directory of p on it.
func Resolve(mounts []Mount, p string) (*Hierarchy, error) {
	if len(mounts) == 0 {
		return nil, ErrNoCgroup2
	}
	for _, ro := range []bool{false, true} {
		for _, m := range mounts {
			if m.ReadOnly != ro {
				continue
			}
			rel, ok := within(m.Root, p)
			if !ok {
				continue
			}
			return &Hierarchy{Mount: m, Cgroup: p, Dir: filepath.Join(m.Mountpoint, rel)}, nil
		}
	}
	return nil, fmt.Errorf("%w: own cgroup %q is not below any cgroup2 mount (%v)", ErrNoCgroup2, p, mounts)
}

// within reports whether p is root or below it, and p relative to root.
func within(root, p string) (string, bool) {
	root = path.Clean("/" + root)
	if root == "/" {
		return p, true
	}
	if p == root {
		return "/", true
	}
	if strings.HasPrefix(p, root+"/") {
		return p[len(root):], true
	}
	return "", false
}

// ParseMountinfo returns the cgroup2 mounts listed in a /proc/<pid>/mountinfo.
func ParseMountinfo(r io.Reader) ([]Mount, error) {
	var out []Mount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		// 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" && i >= 6 {
				sep = i
				break
			}
		}
		if sep < 0 || sep+1 >= len(fields) {
			continue
		}
		if fields[sep+1] != "cgroup2" {
			continue
		}
		ro := false
		for _, o := range strings.Split(fields[5], ",") {
			ro = ro || o == "ro"
		}
		out = append(out, Mount{Mountpoint: unescapeOctal(fields[4]), Root: unescapeOctal(fields[3]), ReadOnly: ro})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading mountinfo: %w", err)
	}
	return out, nil
}

// unescapeOctal undoes the \ooo escaping of mountinfo (space, tab, newline, backslash).
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ParseProcCgroup returns the cgroup v2 path ("0::/path" line) of a /proc/<pid>/cgroup.
func ParseProcCgroup(r io.Reader) (string, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		p, ok := strings.CutPrefix(line, "0::")
		if !ok {
			continue
		}
		p = strings.TrimSuffix(p, " (deleted)")
		if !strings.HasPrefix(p, "/") {
			return "", fmt.Errorf("malformed cgroup v2 line %q", line)
		}
		if p != path.Clean(p) || strings.Contains(p, "/..") {
			// Outside our cgroup namespace root: the directory is not reachable.
			return "", fmt.Errorf("%w: own cgroup %q is outside the cgroup namespace", ErrNoCgroup2, p)
		}
		return p, nil
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("reading /proc/self/cgroup: %w", err)
	}
	return "", fmt.Errorf("%w: no \"0::\" line in /proc/self/cgroup", ErrNoCgroup2)
}
