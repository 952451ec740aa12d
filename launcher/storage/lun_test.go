package storage

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kemu-dev/kemu/api/v1alpha1"
)

// TestPrepareLUNRefused: a lun whose claim is a file system, or a block
// device that does not speak SCSI (a loop device, when this host can make
// one), fails Prepare with an error naming the lun, and the emptyDisk
// prepared before it is removed. The accepting path (a device answering
// SG_IO) cannot be shown here: this machine has no SCSI device
// (docs/launcher.md#luns).
func TestPrepareLUNRefused(t *testing.T) {
	pvcRoot := t.TempDir()
	if err := os.MkdirAll(filepath.Join(pvcRoot, "fs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pvcRoot, "fs", PVCDiskImage), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, claim, text string }{
		{"file-system claim", "fs", "is a file-system persistentVolumeClaim (disk.img): a lun passes a SCSI device through"},
	}
	if loop := loopDevice(t, filepath.Join(t.TempDir(), "loop.img"), 1<<20); loop != "" {
		if err := os.Symlink(loop, filepath.Join(pvcRoot, "loop")); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct{ name, claim, text string }{"loop device", "loop",
			"loop does not speak SCSI (SG_GET_VERSION_NUM: "})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			vmi := vmiWith(
				v1alpha1.Volume{Name: "scratch", EmptyDisk: &v1alpha1.EmptyDiskSource{Capacity: qty("1Mi")}},
				v1alpha1.Volume{Name: "san", PersistentVolumeClaim: &v1alpha1.PersistentVolumeClaimVolumeSource{ClaimName: tc.claim}})
			vmi.Spec.Domain.Devices.Disks = []v1alpha1.Disk{{Name: "scratch"}, {Name: "san", LUN: &v1alpha1.LunTarget{Bus: v1alpha1.DiskBusSCSI}}}
			p, err := Prepare(ctxT(t), vmi, Options{Dir: dir, PVCRoot: pvcRoot})
			if err == nil {
				p.Cleanup()
				t.Fatal("no error")
			}
			const f = "spec.domain.devices.disks[1].lun"
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != f || !strings.HasPrefix(err.Error(), f+": ") || !strings.Contains(err.Error(), tc.text) {
				t.Errorf("error:\n  %v\nwant field %s and %q", err, f, tc.text)
			}
			if left := dirEntries(t, dir); len(left) != 0 {
				t.Errorf("left in the VM directory: %v", left)
			}
		})
	}
}

// TestProbeSCSI: files and devices that are not SCSI say so with the
// ioctl's error (ENOTTY; a loop device answers EINVAL); a missing path says it cannot be opened.
func TestProbeSCSI(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{file, "/dev/null"} {
		err := ProbeSCSI(path)
		if !errors.Is(err, unix.ENOTTY) || !strings.Contains(err.Error(), path+" does not speak SCSI") {
			t.Errorf("ProbeSCSI(%s) = %v, want ENOTTY and what it means", path, err)
		}
	}
	missing := filepath.Join(t.TempDir(), "missing")
	if err := ProbeSCSI(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ProbeSCSI(%s) = %v, want not exist", missing, err)
	}
}
