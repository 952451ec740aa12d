package top

import (
	"strings"
	"testing"
)

func TestBytes(t *testing.T) {
	for _, tc := range []struct {
		in   float64
		want string
	}{
		{0, "0B"}, {-5, "0B"}, {0.4, "0B"}, {512, "512B"}, {1023, "1023B"}, {1023.6, "1.0KiB"}, {1024, "1.0KiB"}, {1024*1024 - 1, "1.0MiB"}, {1536, "1.5KiB"},
		{9.94 * 1024, "9.9KiB"}, {9.96 * 1024, "10KiB"}, {12 * 1024, "12KiB"}, {1000 * 1024, "1000KiB"},
		{3.4 * (1 << 20), "3.4MiB"}, {256 << 20, "256MiB"}, {1 << 30, "1.0GiB"}, {5 << 40, "5.0TiB"},
		{float64(1<<62) * 16, "64EiB"},
	} {
		if got := Bytes(tc.in); got != tc.want {
			t.Errorf("Bytes(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestPercentAndMemory(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{Percent(0), "0%"}, {Percent(0.4), "0%"}, {Percent(0.5), "1%"}, {Percent(49.6), "50%"}, {Percent(100.2), "100%"},
		{Percent(-3), "0%"},
		{Memory(i64(100<<20), i64(256<<20)), "100MiB/256MiB"},
		{Memory(nil, i64(256<<20)), "-"}, {Memory(i64(1), nil), "-"}, {Memory(nil, nil), "-"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestPrintTable(t *testing.T) {
	rows := []Row{
		{Namespace: "a", Name: "web", CPUPercent: 37.2, MemoryUsed: i64(100 << 20), MemoryTotal: i64(1 << 30),
			NetRx: 1536, NetTx: 100, DiskRead: 0, DiskWrite: 4 << 20},
		{Namespace: "team-b", Name: "db-long-name", CPUPercent: 0},
	}
	for _, tc := range []struct {
		name          string
		all, noHeader bool
		want          string
	}{{
		name: "namespace",
		want: `
NAME           CPU(%)   MEMORY(used/total)   NET RX/s   NET TX/s   DISK READ/s   DISK WRITE/s
web            37%      100MiB/1.0GiB        1.5KiB     100B       0B            4.0MiB
db-long-name   0%       -                    0B         0B         0B            0B
`,
	}, {
		name: "all namespaces", all: true,
		want: `
NAMESPACE   NAME           CPU(%)   MEMORY(used/total)   NET RX/s   NET TX/s   DISK READ/s   DISK WRITE/s
a           web            37%      100MiB/1.0GiB        1.5KiB     100B       0B            4.0MiB
team-b      db-long-name   0%       -                    0B         0B         0B            0B
`,
	}, {
		name: "no headers", all: true, noHeader: true,
		want: `
a        web            37%   100MiB/1.0GiB   1.5KiB   100B   0B   4.0MiB
team-b   db-long-name   0%    -               0B       0B     0B   0B
`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			if err := PrintTable(&b, rows, tc.all, tc.noHeader); err != nil {
				t.Fatal(err)
			}
			if got, want := b.String(), strings.TrimPrefix(tc.want, "\n"); got != want {
				t.Errorf("got\n%s\nwant\n%s", got, want)
			}
		})
	}
}

func TestSortRows(t *testing.T) {
	rows := func() []Row {
		return []Row{
			{Namespace: "b", Name: "x", CPUPercent: 10, MemoryUsed: i64(5)},
			{Namespace: "a", Name: "z", CPUPercent: 90},
			{Namespace: "a", Name: "y", CPUPercent: 10, MemoryUsed: i64(50)},
			{Namespace: "c", Name: "w", CPUPercent: 10},
		}
	}
	for _, tc := range []struct {
		by   string
		want string
	}{
		{"", "a/y a/z b/x c/w"},
		{SortCPU, "a/z a/y b/x c/w"},
		{SortMemory, "a/y b/x a/z c/w"},
	} {
		r := rows()
		SortRows(r, tc.by)
		var got []string
		for _, x := range r {
			got = append(got, x.Namespace+"/"+x.Name)
		}
		if g := strings.Join(got, " "); g != tc.want {
			t.Errorf("sort by %q: %s, want %s", tc.by, g, tc.want)
		}
	}
}
