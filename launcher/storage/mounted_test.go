package storage

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kemu-dev/kemu/launcher/images"
)

// An image's own symlinks resolve inside the image, never out of it.
func TestMountedDisk(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("host file"), 0o600); err != nil {
		t.Fatal(err)
	}
	image := func(t *testing.T, files map[string]string, links map[string]string) string {
		root := t.TempDir()
		for name, data := range files {
			p := filepath.Join(root, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(data), 0o444); err != nil {
				t.Fatal(err)
			}
		}
		for name, target := range links {
			p := filepath.Join(root, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
		}
		return root
	}
	for _, tc := range []struct {
		name   string
		files  map[string]string
		links  map[string]string
		path   string
		want   string // the disk, relative to the image's root
		errTxt string
		nf     bool // errors.Is ErrNotFound
	}{
		{name: "the one disk in /disk", files: map[string]string{"disk/d.qcow2": "x"}, want: "disk/d.qcow2"},
		{name: "hidden files skipped", files: map[string]string{"disk/d.img": "x", "disk/.wh.x": ""}, want: "disk/d.img"},
		{name: "path", files: map[string]string{"images/a.img": "a", "images/b.img": "b"}, path: "/images/b.img", want: "images/b.img"},
		{name: "relative path", files: map[string]string{"images/a.img": "a"}, path: "images/a.img", want: "images/a.img"},
		{name: "symlink inside the image", files: map[string]string{"data/real.img": "x"}, links: map[string]string{"disk/d.img": "/data/real.img"}, want: "data/real.img"},
		{name: "absolute symlink stays in the image", links: map[string]string{"disk/d.img": outside}, errTxt: "no disk", nf: true},
		{name: "dot-dot symlink stays in the image", files: map[string]string{"etc/x": "in"}, links: map[string]string{"disk/d.img": "../../../../../../etc/x"}, want: "etc/x"},
		{name: "path escaping with dot-dot", path: "/../../../../" + outside, errTxt: "no file", nf: true},
		{name: "two disks", files: map[string]string{"disk/a.img": "a", "disk/b.img": "b"}, errTxt: "holds 2 files"},
		{name: "no /disk", files: map[string]string{"other/a.img": "a"}, errTxt: "no /disk/", nf: true},
		{name: "path is a directory", files: map[string]string{"disk/a.img": "a"}, path: "/disk", errTxt: "not a regular file", nf: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := image(t, tc.files, tc.links)
			got, err := mountedDisk(root, tc.path)
			if tc.errTxt != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errTxt) || errors.Is(err, images.ErrNotFound) != tc.nf {
					t.Fatalf("mountedDisk = %q, %v; want an error with %q (not found: %v)", got, err, tc.errTxt, tc.nf)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(root, tc.want); got != want {
				t.Errorf("mountedDisk = %q, want %q", got, want)
			}
		})
	}
}
