package launcher

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestParseCPUList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		bad  bool
	}{
		{"", nil, false},
		{"0", []int{0}, false},
		{"0-3,8,10-11", []int{0, 1, 2, 3, 8, 10, 11}, false},
		{"3-1", nil, true},
		{"x", nil, true},
		{"0-99999", nil, true},
		{"-1", nil, true},
	} {
		got, err := parseCPUList(tc.in)
		if (err != nil) != tc.bad || !slices.Equal(got, tc.want) {
			t.Errorf("parseCPUList(%q) = %v, %v", tc.in, got, err)
		}
	}
}

func TestHostNodeOf(t *testing.T) {
	dir := t.TempDir()
	for node, list := range map[string]string{"node0": "0-1,4\n", "node1": "2-3\n"} {
		if err := os.MkdirAll(filepath.Join(dir, node), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, node, "cpulist"), []byte(list), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := hostNodeOf(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]int{0: 0, 1: 0, 4: 0, 2: 1, 3: 1}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for c, n := range want {
		if got[c] != n {
			t.Errorf("CPU %d on node %d, want %d", c, got[c], n)
		}
	}
}
