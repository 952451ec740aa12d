//go:build qemu

package storage

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The qcow2 images kemu writes are what qemu-img makes: the same
// `qemu-img info` figures, a clean `qemu-img check`, and QEMU's block layer
// reads the backing file through them and writes into them (qemu-io), with
// the image still clean after. Run against every QEMU the suites use.
func TestQCOW2LikeQemuImg(t *testing.T) {
	dir := t.TempDir()
	raw := filepath.Join(dir, "base.raw")
	if err := os.WriteFile(raw, bytes.Repeat([]byte{0x33}, 1000), 0o644); err != nil {
		t.Fatal(err)
	}
	qbase := filepath.Join(dir, "base.qcow2")
	qemuImgT(t, "create", "-q", "-f", "qcow2", qbase, "64M")
	qemuIO(t, "qcow2", qbase, "write -P 0x44 0 64k")
	long := filepath.Join(dir, strings.Repeat("d", 200), "base.raw")
	if err := os.MkdirAll(filepath.Dir(long), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(long, bytes.Repeat([]byte{0x55}, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		size        int64
		base, fmt   string
		basePattern byte // what the base holds at offset 0
	}{
		{name: "overlay on an odd-sized raw", size: 1000, base: raw, fmt: FormatRaw, basePattern: 0x33},
		{name: "overlay on qcow2", size: 64 << 20, base: qbase, fmt: FormatQCOW2, basePattern: 0x44},
		{name: "overlay with a long backing name", size: 4096, base: long, fmt: FormatRaw, basePattern: 0x55},
		{name: "empty 1 GiB", size: 1 << 30},
		{name: "empty, two L1 entries", size: 600 << 20},
		{name: "empty 5 TiB, two L1 clusters", size: 5 << 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ours, theirs := filepath.Join(t.TempDir(), "ours.qcow2"), filepath.Join(t.TempDir(), "theirs.qcow2")
			if err := writeQCOW2(ours, tc.size, tc.base, tc.fmt); err != nil {
				t.Fatal(err)
			}
			args := []string{"create", "-q", "-f", "qcow2"}
			if tc.base != "" {
				args = append(args, "-F", tc.fmt, "-b", tc.base, theirs)
			} else {
				args = append(args, theirs, fmt.Sprint(tc.size))
			}
			qemuImgT(t, args...)
			got, want := infoFields(t, ours), infoFields(t, theirs)
			if got != want {
				t.Errorf("qemu-img info:\n ours   %s\n theirs %s", got, want)
			}
			checkClean(t, ours)
			if tc.base != "" {
				qemuIO(t, "qcow2", ours, fmt.Sprintf("read -P 0x%x 0 512", tc.basePattern))
			} else {
				qemuIO(t, "qcow2", ours, "read -P 0 0 64k")
			}
			qemuIO(t, "qcow2", ours, "write -P 0x7e 0 512", "read -P 0x7e 0 512")
			checkClean(t, ours)
		})
	}
}

func qemuImgT(t *testing.T, args ...string) []byte {
	t.Helper()
	out, err := exec.Command("qemu-img", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("qemu-img %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// qemuIO runs qemu-io commands on an image; a failed pattern check fails.
func qemuIO(t *testing.T, format, path string, cmds ...string) {
	t.Helper()
	args := []string{"-f", format}
	for _, c := range cmds {
		args = append(args, "-c", c)
	}
	out, err := exec.Command("qemu-io", append(args, path)...).CombinedOutput()
	if err != nil || strings.Contains(string(out), "Pattern verification failed") || strings.Contains(string(out), "failed") {
		t.Fatalf("qemu-io %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// infoFields is what qemu-img info says of an image that kemu cares about.
func infoFields(t *testing.T, path string) string {
	t.Helper()
	var info struct {
		VirtualSize    int64  `json:"virtual-size"`
		ClusterSize    int64  `json:"cluster-size"`
		Format         string `json:"format"`
		Backing        string `json:"backing-filename"`
		BackingFormat  string `json:"backing-filename-format"`
		FormatSpecific struct {
			Data struct {
				Compat        string `json:"compat"`
				RefcountBits  int    `json:"refcount-bits"`
				Corrupt       bool   `json:"corrupt"`
				LazyRefcounts bool   `json:"lazy-refcounts"`
				ExtendedL2    bool   `json:"extended-l2"`
				Compression   string `json:"compression-type"`
			} `json:"data"`
		} `json:"format-specific"`
	}
	if err := json.Unmarshal(qemuImgT(t, "info", "--output=json", path), &info); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%+v", info)
}

func checkClean(t *testing.T, path string) {
	t.Helper()
	// qemu-img check exits non-zero on errors or leaks.
	var check struct {
		CheckErrors int `json:"check-errors"`
		Corruptions int `json:"corruptions"`
		Leaks       int `json:"leaks"`
	}
	if err := json.Unmarshal(qemuImgT(t, "check", "--output=json", path), &check); err != nil {
		t.Fatal(err)
	}
	if check.CheckErrors != 0 || check.Corruptions != 0 || check.Leaks != 0 {
		t.Errorf("qemu-img check %s: %+v", path, check)
	}
}

// probeImage says what qemu-img info says of the images qemu-img makes.
func TestProbeImageLikeQemuImg(t *testing.T) {
	dir := t.TempDir()
	raw := filepath.Join(dir, "d.raw")
	if err := os.WriteFile(raw, bytes.Repeat([]byte{1}, 3000), 0o644); err != nil {
		t.Fatal(err)
	}
	img := func(name string, args ...string) string {
		p := filepath.Join(dir, name)
		qemuImgT(t, append(append([]string{"create", "-q"}, args...), p)...)
		return p
	}
	for _, p := range []string{
		raw,
		img("v3.qcow2", "-f", "qcow2", "-o", "size=64M"),
		img("v2.qcow2", "-f", "qcow2", "-o", "compat=0.10,size=1G"),
		img("small-clusters.qcow2", "-f", "qcow2", "-o", "cluster_size=512,size=10M"),
		img("backed.qcow2", "-f", "qcow2", "-F", "raw", "-b", raw),
		img("datafile.qcow2", "-f", "qcow2", "-o", "data_file="+filepath.Join(dir, "data.raw")+",size=1M"),
		img("empty.raw", "-f", "raw", "-o", "size=0"),
	} {
		t.Run(filepath.Base(p), func(t *testing.T) {
			got, err := probeImage(p)
			if err != nil {
				t.Fatal(err)
			}
			want, err := (qemuImg{}).info(t.Context(), p)
			if err != nil {
				t.Fatal(err)
			}
			if got.Format != want.Format || got.VirtualSize != want.VirtualSize || got.BackingFilename != want.BackingFilename ||
				(got.FormatSpecific.Data.DataFile == "") != (want.FormatSpecific.Data.DataFile == "") {
				t.Errorf("probeImage: %+v\nqemu-img:   %+v", got, want)
			}
		})
	}
}
