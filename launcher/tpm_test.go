package launcher

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// persistentState on a backend storage whose content anyone with the
// claim could have written: a first start makes swtpm/ (0700), a present
// state is reused, and whatever is not a small regular file of one link
// is refused by name, without following or opening it.
func TestPersistentState(t *testing.T) {
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, root string) // root/swtpm may not exist yet
		reused  bool
		files   int // the directory and its entries
		wantErr string
	}{
		{name: "first start", files: 1},
		{name: "reused", setup: func(t *testing.T, root string) {
			write(t, filepath.Join(root, "swtpm", "tpm2-00.permall"), 5000)
			write(t, filepath.Join(root, "swtpm", ".lock"), 0)
		}, reused: true, files: 3},
		{name: "empty directory", setup: func(t *testing.T, root string) { mkdir(t, filepath.Join(root, "swtpm")) }, files: 1},
		{name: "swtpm a symlink", setup: func(t *testing.T, root string) {
			symlink(t, "/etc", filepath.Join(root, "swtpm"))
		}, wantErr: "swtpm must be a directory"},
		{name: "swtpm a file", setup: func(t *testing.T, root string) {
			write(t, filepath.Join(root, "swtpm"), 1)
		}, wantErr: "swtpm must be a directory"},
		{name: "symlinked state", setup: func(t *testing.T, root string) {
			mkdir(t, filepath.Join(root, "swtpm"))
			symlink(t, "/etc/shadow", filepath.Join(root, "swtpm", "tpm2-00.permall"))
		}, wantErr: "swtpm/tpm2-00.permall: not a regular file"},
		{name: "fifo", setup: func(t *testing.T, root string) {
			mkdir(t, filepath.Join(root, "swtpm"))
			if err := syscall.Mkfifo(filepath.Join(root, "swtpm", "tpm2-00.permall"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, wantErr: "swtpm/tpm2-00.permall: not a regular file"},
		{name: "subdirectory", setup: func(t *testing.T, root string) {
			mkdir(t, filepath.Join(root, "swtpm", "x"))
		}, wantErr: "swtpm/x: not a regular file"},
		{name: "hard link", setup: func(t *testing.T, root string) {
			write(t, filepath.Join(root, "elsewhere"), 10)
			mkdir(t, filepath.Join(root, "swtpm"))
			if err := os.Link(filepath.Join(root, "elsewhere"), filepath.Join(root, "swtpm", "tpm2-00.permall")); err != nil {
				t.Fatal(err)
			}
		}, wantErr: "swtpm/tpm2-00.permall: 2 hard links"},
		{name: "too large", setup: func(t *testing.T, root string) {
			write(t, filepath.Join(root, "swtpm", "tpm2-00.permall"), maxSwtpmStateFileSize+1)
		}, wantErr: "more than swtpm's state"},
		{name: "too many", setup: func(t *testing.T, root string) {
			for i := range maxSwtpmStateFiles + 1 {
				write(t, filepath.Join(root, "swtpm", strings.Repeat("f", i+1)), 0)
			}
		}, wantErr: "more than 16 entries"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.setup != nil {
				tc.setup(t, root)
			}
			files, reused, err := persistentState(root)
			defer func() {
				for _, f := range files {
					f.Close()
				}
			}()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				if files != nil {
					t.Errorf("files %v left open on error", files)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if reused != tc.reused || len(files) != tc.files {
				t.Errorf("reused %v, %d files; want %v, %d", reused, len(files), tc.reused, tc.files)
			}
			st, err := os.Lstat(filepath.Join(root, "swtpm"))
			if err != nil || !st.IsDir() || st.Mode().Perm() != 0o700 {
				t.Errorf("swtpm/: %v %v, want a 0700 directory", st, err)
			}
		})
	}
}

func mkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, p string, size int) {
	t.Helper()
	mkdir(t, filepath.Dir(p))
	if err := os.WriteFile(p, make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, p string) {
	t.Helper()
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}
