package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCopyAll(t *testing.T) {
	src, dst := t.TempDir(), filepath.Join(t.TempDir(), "out")
	if err := os.WriteFile(filepath.Join(src, "disk.qcow2"), []byte("disk"), 0o600); err != nil { // 107:107 0600 in many images
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(src, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if n, err := copyAll(src, dst); err != nil || n != 1 {
		t.Fatalf("copyAll = %d, %v", n, err)
	}
	b, err := os.ReadFile(filepath.Join(dst, "disk.qcow2"))
	if err != nil || string(b) != "disk" {
		t.Fatalf("copied %q, %v", b, err)
	}
	if st, _ := os.Stat(filepath.Join(dst, "disk.qcow2")); st.Mode().Perm() != 0o444 {
		t.Fatalf("mode %v, want 0444", st.Mode().Perm())
	}
	// A single file (the self-install of the binary keeps its x bits).
	exe := filepath.Join(src, "tool")
	if err := os.WriteFile(exe, []byte("#!"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := copyAll(exe, dst); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(filepath.Join(dst, "tool")); st.Mode().Perm() != 0o555 {
		t.Fatalf("mode %v, want 0555", st.Mode().Perm())
	}
	if _, err := copyAll(filepath.Join(src, "sub"), dst); err == nil {
		t.Fatal("an empty directory must be an error")
	}
}

func TestRunSeveralSources(t *testing.T) {
	src, dst := t.TempDir(), filepath.Join(t.TempDir(), "out")
	for _, f := range []string{"vmlinuz", "initrd.img"} {
		if err := os.WriteFile(filepath.Join(src, f), []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var errs strings.Builder
	if code := run([]string{filepath.Join(src, "vmlinuz"), filepath.Join(src, "initrd.img"), dst}, io.Discard, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	for _, f := range []string{"vmlinuz", "initrd.img"} {
		if b, err := os.ReadFile(filepath.Join(dst, f)); err != nil || string(b) != f {
			t.Errorf("%s: %q %v", f, b, err)
		}
	}
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{dst}, 2, "usage"},
		{[]string{filepath.Join(src, "vmlinuz"), filepath.Join(dst, "vmlinuz"), t.TempDir()}, 2, "would both be"},
		{[]string{filepath.Join(src, "missing"), dst}, 1, "missing"},
	} {
		errs.Reset()
		if code := run(tc.args, io.Discard, &errs); code != tc.code || !strings.Contains(errs.String(), tc.msg) {
			t.Errorf("run(%q) = %d %q, want %d and %q", tc.args, code, errs.String(), tc.code, tc.msg)
		}
	}
}
