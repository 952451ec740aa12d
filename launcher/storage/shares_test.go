package storage

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kemu-dev/kemu/api/v1alpha1"
)

// shared adds a filesystem for each named volume.
func shared(vmi *v1alpha1.VirtualMachineInstance, names ...string) *v1alpha1.VirtualMachineInstance {
	for _, n := range names {
		vmi.Spec.Domain.Devices.Filesystems = append(vmi.Spec.Domain.Devices.Filesystems,
			v1alpha1.Filesystem{Name: n, Virtiofs: &v1alpha1.FilesystemVirtiofs{}})
	}
	return vmi
}

// A shared claim is its mount directory (no disk.img needed, none opened),
// not a disk; nothing is created for it and Cleanup leaves it alone.
func TestPrepareSharedClaim(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	vmi := shared(vmiWith(v1alpha1.Volume{Name: "fs", PersistentVolumeClaim: &v1alpha1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}), "fs")
	dir := t.TempDir()
	p, err := Prepare(context.Background(), vmi, Options{Dir: dir, PVCRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	want := Share{Name: "fs", Kind: KindPersistentVolumeClaim, Dir: filepath.Join(root, "data"),
		Field: "spec.volumes[0].persistentVolumeClaim.claimName"}
	if got := p.Shares["fs"]; got != want {
		t.Errorf("share = %+v, want %+v", got, want)
	}
	if len(p.Volumes) != 0 || len(p.Files()) != 0 {
		t.Errorf("a share made disks %v or files %v", p.Volumes, p.Files())
	}
	if err := p.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "data")); err != nil {
		t.Errorf("Cleanup touched the claim: %v", err)
	}
}

// What cannot be shared is refused naming the field.
func TestPrepareShareErrors(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := configDir(t, map[string]map[string]string{"cm": {"k": "v"}})
	claim := func(name string, ro bool) v1alpha1.Volume {
		return v1alpha1.Volume{Name: "fs", PersistentVolumeClaim: &v1alpha1.PersistentVolumeClaimVolumeSource{ClaimName: name, ReadOnly: ro}}
	}
	for _, tc := range []struct {
		name  string
		vol   v1alpha1.Volume
		opts  Options
		field string
		msg   string
	}{
		{"missing claim", claim("nope", false), Options{PVCRoot: root}, "spec.volumes[0].persistentVolumeClaim.claimName", "not found"},
		{"claim is a file", claim("file", false), Options{PVCRoot: root}, "spec.volumes[0].persistentVolumeClaim.claimName", "not a directory"},
		{"no claim root", claim("data", false), Options{}, "spec.volumes[0].persistentVolumeClaim.claimName", "no claim directory"},
		{"read-only claim on a writable mount", claim("data", true), Options{PVCRoot: root}, "spec.volumes[0].persistentVolumeClaim.claimName", "writable mount"},
		{"bad claim name", claim("", true), Options{PVCRoot: root}, "spec.volumes[0].persistentVolumeClaim.claimName", "invalid claim name"},
		{"config volume not mounted", v1alpha1.Volume{Name: "fs", ConfigMap: &v1alpha1.ConfigMapVolumeSource{Name: "x"}}, Options{ConfigDir: cfg}, "spec.volumes[0].configMap", "no mount of volume"},
		{"config volume without a cluster", v1alpha1.Volume{Name: "fs", Secret: &v1alpha1.SecretVolumeSource{SecretName: "x"}}, Options{}, "spec.volumes[0].secret", "needs a cluster"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Dir = t.TempDir()
			_, err := Prepare(context.Background(), shared(vmiWith(tc.vol), "fs"), tc.opts)
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want a FieldError on %s saying %q", err, tc.field, tc.msg)
			}
		})
	}
	// A config volume is shared read-only: on a writable mount (a plain
	// directory here; the kubelet's mounts are read-only) it is refused.
	cm := v1alpha1.Volume{Name: "cm", ConfigMap: &v1alpha1.ConfigMapVolumeSource{Name: "x"}}
	_, err := Prepare(context.Background(), shared(vmiWith(cm), "cm"), Options{Dir: t.TempDir(), ConfigDir: cfg})
	if err == nil || !strings.Contains(err.Error(), "spec.volumes[0].configMap: ") || !strings.Contains(err.Error(), "writable mount") {
		t.Errorf("a config volume on a writable mount: %v", err)
	}
}

// A containerPath is shared only when it names a mount of the launcher's
// container itself: listed in its mountinfo, a directory, no symlink on the
// way.
func TestContainerMount(t *testing.T) {
	root := t.TempDir()
	mount := filepath.Join(root, "secrets", "eks token")
	plain := filepath.Join(root, "plain")
	link := filepath.Join(root, "link")
	for _, d := range []string{mount, plain} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(mount, link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	info := filepath.Join(t.TempDir(), "mountinfo")
	escaped := strings.ReplaceAll(mount, " ", `\040`)
	lines := "22 1 0:21 / / rw,relatime - overlay overlay rw\n" +
		"1510 22 0:95 / " + escaped + " ro,relatime - tmpfs tmpfs rw,size=1024k\n" +
		"1511 22 0:95 / " + link + " ro,relatime - tmpfs tmpfs rw\n" +
		"1512 22 0:96 / " + file + " ro,relatime - tmpfs tmpfs rw\n"
	if err := os.WriteFile(info, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dir, want string
	}{
		{mount, ""},
		{plain, "is not a mount of the launcher container"},
		{link, "leads through a symlink"},
		{file, "is not a directory"},
		{filepath.Join(root, "missing"), "has no"},
	} {
		err := containerMount(tc.dir, info)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.dir, err, tc.want)
		}
	}
}
