package hostdisk

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// The host and the launcher's container are two directory trees here: what
// the launcher "mounted" at a path is whatever the container tree has there
// (a hard link of the host file stands for a correct bind mount).
func TestCheck(t *testing.T) {
	host, pod := t.TempDir(), t.TempDir()
	write := func(root, p, content string) {
		t.Helper()
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	link := func(root, p, target string) {
		t.Helper()
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, full); err != nil {
			t.Fatal(err)
		}
	}
	mount := func(p string) { // the container sees the host's file at p
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(pod, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(filepath.Join(host, p), filepath.Join(pod, p)); err != nil {
			t.Fatal(err)
		}
	}
	mountDir := func(p string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(pod, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(host, p), filepath.Join(pod, p)); err != nil {
			t.Fatal(err)
		}
	}
	write(host, "etc/shadow", "secret")
	write(host, "disks/ok.img", "disk")
	mount("disks/ok.img")
	write(host, "disks/team/deep.img", "disk")
	mount("disks/team/deep.img")
	link(host, "disks/evil.img", "/etc/shadow") // kubelet would mount the host's /etc/shadow
	write(pod, "disks/evil.img", "what the kubelet mounted")
	link(host, "disks/rel.img", "../etc/shadow")
	write(pod, "disks/rel.img", "what the kubelet mounted")
	link(host, "disks/sub", "/etc")
	write(pod, "disks/sub/shadow", "what the kubelet mounted")
	write(host, "disks/swapped.img", "disk")
	write(pod, "disks/swapped.img", "another file") // replaced between mount and check
	// DiskOrCreate mounts the allowed directory itself.
	if err := os.MkdirAll(filepath.Join(host, "disks2"), 0o755); err != nil {
		t.Fatal(err)
	}
	mountDir("disks2")
	if err := os.MkdirAll(filepath.Join(host, "disks3"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(pod, "disks3"), 0o755); err != nil { // not the host's
		t.Fatal(err)
	}
	allowed := []string{"/disks", "/disks2", "/disks3"}

	for _, tc := range []struct {
		name, path string
		typ        v1.HostDiskType
		wantErr    string
	}{
		{"file beneath", "/disks/ok.img", v1.HostDiskExists, ""},
		{"deeper", "/disks/team/deep.img", v1.HostDiskExists, ""},
		{"absolute symlink", "/disks/evil.img", v1.HostDiskExists, "a symlink on the way"},
		{"relative symlink", "/disks/rel.img", v1.HostDiskExists, "a symlink on the way"},
		{"symlinked directory", "/disks/sub/shadow", v1.HostDiskExists, "a symlink on the way"},
		{"swapped file", "/disks/swapped.img", v1.HostDiskExists, "mounted another file"},
		{"missing Disk", "/disks/none.img", v1.HostDiskExists, "does not exist"},
		{"DiskOrCreate not created yet", "/disks2/new.img", v1.HostDiskExistsOrCreate, ""},
		{"DiskOrCreate, another directory mounted", "/disks3/new.img", v1.HostDiskExistsOrCreate, "mounted another file"},
		{"outside", "/etc/shadow", v1.HostDiskExists, "not beneath"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vmi := &v1.VirtualMachineInstance{Spec: v1.VirtualMachineInstanceSpec{Volumes: []v1.Volume{
				{Name: "d", HostDisk: &v1.HostDisk{Path: tc.path, Type: tc.typ}}}}}
			errs := Check(host, pod, allowed, vmi)
			if tc.wantErr == "" {
				if len(errs) != 0 {
					t.Fatal(errs)
				}
				return
			}
			if len(errs) != 1 || errs[0].Field != "spec.volumes[0].hostDisk.path" || !strings.Contains(errs[0].Error(), tc.wantErr) {
				t.Fatalf("got %v, want an error on spec.volumes[0].hostDisk.path with %q", errs, tc.wantErr)
			}
		})
	}
}
