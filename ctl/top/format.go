package top

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
)

// Sort orders of --sort-by (kubectl top's: the largest first).
const (
	SortCPU    = "cpu"
	SortMemory = "memory"
)

// SortRows orders rows by namespace and name, or by by (SortCPU,
// SortMemory: the largest first, rows without the figure last, ties by
// namespace and name).
func SortRows(rows []Row, by string) {
	byName := func(a, b Row) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	}
	slices.SortStableFunc(rows, func(a, b Row) int {
		switch by {
		case SortCPU:
			if c := cmp.Compare(b.CPUPercent, a.CPUPercent); c != 0 {
				return c
			}
		case SortMemory:
			switch {
			case a.MemoryUsed == nil && b.MemoryUsed != nil:
				return 1
			case a.MemoryUsed != nil && b.MemoryUsed == nil:
				return -1
			case a.MemoryUsed != nil && b.MemoryUsed != nil:
				if c := cmp.Compare(*b.MemoryUsed, *a.MemoryUsed); c != 0 {
					return c
				}
			}
		}
		return byName(a, b)
	})
}

// columns are the table's headers (NAMESPACE first with -A).
var columns = []string{"NAME", "CPU(%)", "MEMORY(used/total)", "NET RX/s", "NET TX/s", "DISK READ/s", "DISK WRITE/s"}

// PrintTable writes rows as kubectl top does: tab-aligned columns, a
// header line unless noHeaders, NAMESPACE first when allNamespaces.
func PrintTable(w io.Writer, rows []Row, allNamespaces, noHeaders bool) error {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	line := func(cells []string) {
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if !noHeaders {
		h := columns
		if allNamespaces {
			h = append([]string{"NAMESPACE"}, columns...)
		}
		line(h)
	}
	for _, r := range rows {
		cells := []string{r.Name, Percent(r.CPUPercent), Memory(r.MemoryUsed, r.MemoryTotal),
			Bytes(r.NetRx), Bytes(r.NetTx), Bytes(r.DiskRead), Bytes(r.DiskWrite)}
		if allNamespaces {
			cells = append([]string{r.Namespace}, cells...)
		}
		line(cells)
	}
	return tw.Flush()
}

// Percent is a share rounded to a whole percent, as kubectl top node
// prints CPU%.
func Percent(p float64) string {
	return fmt.Sprintf("%d%%", int64(math.Round(max(p, 0))))
}

// Memory is "used/total" in binary units, "-" when the guest did not
// report them.
func Memory(used, total *int64) string {
	if used == nil || total == nil {
		return "-"
	}
	return Bytes(float64(*used)) + "/" + Bytes(float64(*total))
}

// units are the binary prefixes Bytes uses.
var units = []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}

// Bytes is an amount of bytes (or bytes per second) in binary units:
// whole bytes below 1 KiB, one decimal below 10 of a unit, else whole
// units ("0B", "512B", "1.5KiB", "12KiB", "3.4MiB").
func Bytes(v float64) string {
	v = max(v, 0)
	i := 0
	for v >= 1023.5 && i < len(units)-1 { // what would print as 1024 moves up
		v /= 1024
		i++
	}
	switch {
	case i == 0:
		return fmt.Sprintf("%d%s", int64(math.Round(v)), units[i])
	case v < 9.95:
		return fmt.Sprintf("%.1f%s", v, units[i])
	}
	return fmt.Sprintf("%d%s", int64(math.Round(v)), units[i])
}
