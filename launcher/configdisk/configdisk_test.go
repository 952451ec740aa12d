package configdisk

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// kubeletDir lays files out as the kubelet's atomic writer does: the data
// in a timestamped directory, "..data" pointing at it, one symlink per top
// level entry through "..data".
func kubeletDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	ts := filepath.Join(dir, "..2026_11_28_00_00_00.000000001")
	tops := map[string]bool{}
	for name, content := range files {
		p := filepath.Join(ts, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		tops[strings.SplitN(name, "/", 2)[0]] = true
	}
	if err := os.Symlink(filepath.Base(ts), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for top := range tops {
		if err := os.Symlink(filepath.Join("..data", top), filepath.Join(dir, top)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// readISO lists an image's files (Rock Ridge names) and their content.
func readISO(t *testing.T, p string) (label string, files map[string]string) {
	t.Helper()
	label, raw, err := Read(p)
	if err != nil {
		t.Fatal(err)
	}
	files = map[string]string{}
	for k, v := range raw {
		files[k] = string(v)
	}
	return label, files
}

func TestFromDir(t *testing.T) {
	want := map[string]string{
		"App.Properties.yaml":                               "color: blue\n",
		"a-key-name-longer-than-thirty-one-characters.conf": "x",
		"nested/dir/file":                                   "deep\n",
		"empty":                                             "",
	}
	src := kubeletDir(t, want)
	dst := filepath.Join(t.TempDir(), "cm.iso")
	if err := FromDir(dst, "mylabel", src, filepath.Dir(dst)); err != nil {
		t.Fatal(err)
	}
	label, got := readISO(t, dst)
	if label != "mylabel" {
		t.Errorf("label %q, want mylabel", label)
	}
	if len(got) != len(want) {
		t.Errorf("files %v, want %v", keys(got), keys(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
	st, err := os.Stat(dst)
	if err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("image: %v, %v", st, err)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(dst), ".*")); len(left) != 0 {
		t.Errorf("staging left behind: %v", left)
	}
}

func TestFromDirRefuses(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "host-secret")
	if err := os.WriteFile(outside, []byte("node's"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		setup func(dir string)
		want  string
	}{
		{"symlink out of the volume", func(dir string) {
			_ = os.Symlink(outside, filepath.Join(dir, "key"))
		}, "escapes"},
		{"too large", func(dir string) {
			_ = os.WriteFile(filepath.Join(dir, "big"), make([]byte, MaxBytes+1), 0o644)
		}, "too large"},
		{"too many files", func(dir string) {
			for i := 0; i <= MaxFiles; i++ {
				_ = os.WriteFile(filepath.Join(dir, "f"+strconv.Itoa(i)), nil, 0o644)
			}
		}, "too large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := t.TempDir()
			tc.setup(src)
			out := t.TempDir()
			dst := filepath.Join(out, "x.iso")
			err := FromDir(dst, DefaultLabel, src, out)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
			if tc.want == "too large" && !errors.Is(err, ErrTooLarge) {
				t.Errorf("err %v is not ErrTooLarge", err)
			}
			if left, _ := os.ReadDir(out); len(left) != 0 {
				t.Errorf("left behind: %v", left)
			}
		})
	}
}

func TestFromFiles(t *testing.T) {
	dir := t.TempDir()
	dst := filepath.Join(dir, "config-2.iso")
	in := map[string][]byte{"openstack/latest/user_data": []byte("#cloud-config\n"), "openstack/latest/meta_data.json": []byte("{}")}
	if err := FromFiles(dst, "config-2", in, dir); err != nil {
		t.Fatal(err)
	}
	label, got := readISO(t, dst)
	if label != "config-2" || got["openstack/latest/user_data"] != "#cloud-config\n" || got["openstack/latest/meta_data.json"] != "{}" {
		t.Errorf("label %q files %v", label, got)
	}
	for _, bad := range []string{"../x", "/abs", ""} {
		if err := FromFiles(dst, "x", map[string][]byte{bad: nil}, dir); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if err := FromFiles(dst, strings.Repeat("l", MaxLabel+1), in, dir); err == nil {
		t.Error("long label accepted")
	}
}

func keys(m map[string]string) []string {
	var k []string
	for s := range m {
		k = append(k, s)
	}
	sort.Strings(k)
	return k
}
