package validation

import (
	"strings"
	"testing"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

func TestParseHostDiskDirs(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []string
		wantErr bool
	}{
		{"", nil, false},
		{"/var/lib/kemu-disks", []string{"/var/lib/kemu-disks"}, false},
		{"/a, /b\n/c", []string{"/a", "/b", "/c"}, false},
		{"/", nil, true},
		{"relative/dir", nil, true},
		{"/a/../etc", nil, true},
		{"/a/", nil, true},
	} {
		got, err := ParseHostDiskDirs(tc.in)
		if (err != nil) != tc.wantErr || strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("ParseHostDiskDirs(%q) = %v, %v", tc.in, got, err)
		}
	}
}

func TestValidateHostDisks(t *testing.T) {
	allowed := []string{"/var/lib/kemu-disks", "/srv/vm"}
	for _, tc := range []struct {
		name, path string
		allowed    []string
		wantErr    string
	}{
		{"beneath", "/var/lib/kemu-disks/a.img", allowed, ""},
		{"deeper", "/srv/vm/team/a.img", allowed, ""},
		{"host file", "/etc/shadow", allowed, "not beneath a directory kemu-config hostDiskDirs allows"},
		{"the directory itself", "/srv/vm", allowed, "not beneath"},
		{"prefix but not beneath", "/srv/vmx/a.img", allowed, "not beneath"},
		{"dot-dot out", "/srv/vm/../../etc/shadow", allowed, "clean absolute path"},
		{"dot-dot staying in", "/srv/vm/a/../b.img", allowed, "clean absolute path"},
		{"double slash", "/srv//vm/a.img", allowed, "clean absolute path"},
		{"nothing configured", "/srv/vm/a.img", nil, "hostDisks are not allowed on this cluster"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vmi := &v1.VirtualMachineInstance{Spec: v1.VirtualMachineInstanceSpec{Volumes: []v1.Volume{
				{Name: "a", EmptyDisk: &v1.EmptyDiskSource{}},
				{Name: "b", HostDisk: &v1.HostDisk{Path: tc.path, Type: v1.HostDiskExists}},
			}}}
			errs := ValidateHostDisks(vmi, tc.allowed)
			if tc.wantErr == "" {
				if len(errs) > 0 {
					t.Fatal(errs)
				}
				return
			}
			if len(errs) != 1 || errs[0].Field != "spec.volumes[1].hostDisk.path" || !strings.Contains(errs[0].Error(), tc.wantErr) {
				t.Fatalf("got %v, want one error on spec.volumes[1].hostDisk.path with %q", errs, tc.wantErr)
			}
		})
	}
}
