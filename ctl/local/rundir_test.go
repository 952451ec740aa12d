package local

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kemu-dev/kemu/launcher/cmdline"
)

// kemuctl run's runtime directory holds QEMU's sockets: whatever the VMI's
// name (up to 253 characters, dotted), its name is a file name and the
// sockets' paths fit in sun_path.
func TestNewRunDir(t *testing.T) {
	t.Setenv("TMPDIR", "/tmp")
	for _, name := range []string{"vm1", "web.example.com", strings.Repeat("a", 100),
		strings.Repeat(strings.Repeat("b", 62)+".", 4) + "b"} {
		dir, err := newRunDir(name)
		if err != nil {
			t.Fatalf("VMI %q: %v", name, err)
		}
		defer os.RemoveAll(dir)
		if sock := filepath.Join(dir, "qmp-debug.sock"); len(sock) > cmdline.MaxSocketPath {
			t.Errorf("VMI %q: socket %s is %d bytes", name, sock, len(sock))
		}
		if !strings.HasPrefix(filepath.Base(dir), "kemu-"+name[:min(len(name), 3)]) {
			t.Errorf("VMI %q: directory %s", name, dir)
		}
	}
}
