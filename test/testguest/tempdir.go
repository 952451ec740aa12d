package testguest

import (
	"os"
	"testing"
)

// TempDir is a short temporary directory (unix socket paths are limited)
// that QEMU's unprivileged user (launcher/unpriv: 107) may traverse, removed
// at the end of the test. t.TempDir and os.MkdirTemp make 0700 directories,
// which a launcher running as root can use but the QEMU it starts cannot.
func TempDir(t testing.TB, prefix string) string {
	t.Helper()
	d, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o711); err != nil {
		t.Fatal(err)
	}
	return d
}
