package local

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The serial log keeps what arrives up to its bound, says it cut the rest,
// and never fails a write (the console's reader goes on).
func TestSerialLogBounded(t *testing.T) {
	file := filepath.Join(t.TempDir(), "boot.log")
	s, err := openSerialLog(file)
	if err != nil {
		t.Fatal(err)
	}
	s.max = 10
	for _, w := range []string{"boot: ", "kernel ", "up\n", "more\n"} {
		if n, err := s.Write([]byte(w)); n != len(w) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", w, n, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(file)
	if !strings.HasPrefix(string(b), "boot: kern\n[kemuctl: serial log truncated at 10 bytes]") || strings.Contains(string(b), "more") {
		t.Fatalf("log %q", b)
	}
	if _, err := s.Write([]byte("after close")); err != nil {
		t.Fatal(err)
	}
}
