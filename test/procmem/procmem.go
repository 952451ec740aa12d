// Package procmem reads a process's memory for the benchmarks: resident,
// proportional and anonymous set from /proc/<pid>/smaps_rollup.
package procmem

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Usage is a process's memory, in bytes.
type Usage struct {
	// RSS is every resident page mapped by the process.
	RSS int64
	// PSS divides each page by the number of processes mapping it: a
	// binary's pages shared by ten launchers count a tenth each.
	PSS int64
	// Anon is the resident anonymous memory (heap, stacks, private copies).
	Anon int64
	// File is the resident file-backed memory (the executable, libraries).
	File int64
}

// MiB converts bytes for a benchmark metric.
func MiB(b int64) float64 { return float64(b) / (1 << 20) }

// Read returns pid's memory.
func Read(pid int) (Usage, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return Usage{}, err
	}
	return Parse(b)
}

// Parse reads the smaps_rollup format.
func Parse(rollup []byte) (Usage, error) {
	var u Usage
	fields := map[string]*int64{"Rss:": &u.RSS, "Pss:": &u.PSS, "Anonymous:": &u.Anon}
	sc := bufio.NewScanner(bytes.NewReader(rollup))
	seen := 0
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		p, ok := fields[f[0]]
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return Usage{}, fmt.Errorf("procmem: %q: %w", sc.Text(), err)
		}
		*p = kb << 10
		seen++
	}
	if err := sc.Err(); err != nil {
		return Usage{}, err
	}
	if seen != len(fields) {
		return Usage{}, fmt.Errorf("procmem: smaps_rollup without Rss, Pss and Anonymous")
	}
	u.File = u.RSS - u.Anon
	return u, nil
}
