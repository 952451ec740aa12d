package storage

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestPreallocated(t *testing.T) {
	dir := t.TempDir()
	sparse := filepath.Join(dir, "sparse.img")
	if err := os.WriteFile(sparse, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(sparse, 1<<20); err != nil {
		t.Fatal(err)
	}
	full := filepath.Join(dir, "full.img")
	f, err := os.Create(full)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Fallocate(int(f.Fd()), 0, 0, 1<<20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, c := range []struct {
		path string
		size int64
		want bool
	}{
		{sparse, 1 << 20, false},
		{full, 1 << 20, true},
		{full, 2 << 20, false}, // a qcow2's virtual size beyond its file
		{filepath.Join(dir, "missing"), 1, false},
		{dir, 1, false},
	} {
		if got := Preallocated(c.path, c.size); got != c.want {
			t.Errorf("Preallocated(%s, %d) = %v, want %v", c.path, c.size, got, c.want)
		}
	}
}

func TestDirectIOMissing(t *testing.T) {
	if DirectIO(filepath.Join(t.TempDir(), "missing")) {
		t.Error("a missing file takes O_DIRECT")
	}
}
