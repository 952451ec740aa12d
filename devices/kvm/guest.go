package kvm

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cavaliergopher/cpio"
	"golang.org/x/sys/unix"
)

// The probe's built-in guests (guest/boot.S, guest/init.S; guest/build.sh
// builds them and hack/verify-codegen.sh checks they are current).
var (
	//go:embed guest/boot.bin
	bootSector []byte
	//go:embed guest/init.bin
	probeInit []byte
)

// bootDiskSize pads the boot sector into a disk SeaBIOS boots (it cannot
// read a 512-byte disk).
const bootDiskSize = 1 << 20

// guest is what the probe boots: QEMU arguments, the files they name (in a
// directory removed after the probe) and what the verdict depends on.
type guest struct {
	desc string   // for the verdict's reason
	args []string // after the machine, CPU and memory arguments
	key  string   // identifies the guest in the cache key
}

// hostKernels lists where a distribution keeps the running kernel's image.
var hostKernels = func(release string) []string {
	return []string{"/boot/vmlinuz-" + release, "/lib/modules/" + release + "/vmlinuz"}
}

// chooseGuest picks the probe guest, most Linux-like first:
//   - Options.Kernel and Initrd (an initramfs whose init prints the ready
//     marker, e.g. kemu's test guest in the node agent image);
//   - the host's own kernel, readable under /boot or /lib/modules, with a
//     generated initramfs whose /init prints the marker (guest/init.S);
//   - the built-in boot sector (guest/boot.S): BIOS disk calls in real mode,
//     BIOS timer interrupts, protected mode, long mode with paging and a
//     handled page fault. It needs no files, but a host may run it and
//     still hang a Linux guest, so it comes last.
//
// Files are written to dir.
func chooseGuest(o Options, dir string) (guest, error) {
	if o.Kernel != "" || o.Initrd != "" {
		for _, f := range []string{o.Kernel, o.Initrd} {
			if f == "" {
				return guest{}, fmt.Errorf("probe guest: a kernel needs an initramfs and an initramfs a kernel")
			}
			if _, err := os.Stat(f); err != nil {
				return guest{}, fmt.Errorf("probe guest: %w", err)
			}
		}
		return linuxGuest("a Linux guest", o.Kernel, o.Initrd, fileKey(o.Kernel, o.Initrd)), nil
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return guest{}, fmt.Errorf("uname: %w", err)
	}
	for _, k := range hostKernels(unix.ByteSliceToString(u.Release[:])) {
		f, err := os.Open(k)
		if err != nil {
			continue // absent, or not readable without root
		}
		_ = f.Close()
		initrd := filepath.Join(dir, "initrd.cpio")
		if err := writeInitramfs(initrd); err != nil {
			return guest{}, err
		}
		return linuxGuest("a Linux guest (the host's kernel "+k+")", k, initrd,
			fileKey(k)+"+"+hash(probeInit)), nil
	}
	disk := filepath.Join(dir, "boot.img")
	if err := os.WriteFile(disk, bootSector, 0o600); err != nil {
		return guest{}, fmt.Errorf("probe guest: %w", err)
	}
	if err := os.Truncate(disk, bootDiskSize); err != nil {
		return guest{}, fmt.Errorf("probe guest: %w", err)
	}
	return guest{
		desc: "kemu's built-in probe guest (no host kernel readable)",
		args: []string{"-drive", "file=" + disk + ",format=raw,if=none,id=probe,readonly=on",
			"-device", "virtio-blk-pci,drive=probe"},
		key: "builtin:" + hash(bootSector),
	}, nil
}

func linuxGuest(desc, kernel, initrd, key string) guest {
	return guest{desc: desc, key: key, args: []string{"-kernel", kernel, "-initrd", initrd,
		"-append", "console=ttyS0 quiet panic=-1 kemu.tick=0 kemu.agent=0 kemu.dhcp=0"}}
}

// writeInitramfs writes an uncompressed newc cpio holding /init.
func writeInitramfs(path string) error {
	var b bytes.Buffer
	w := cpio.NewWriter(&b)
	hdr := &cpio.Header{Name: "init", Mode: cpio.TypeReg | 0o755, Size: int64(len(probeInit)),
		Links: 1, ModTime: time.Unix(0, 0)}
	if err := w.WriteHeader(hdr); err != nil {
		return fmt.Errorf("probe initramfs: %w", err)
	}
	if _, err := w.Write(probeInit); err != nil {
		return fmt.Errorf("probe initramfs: %w", err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("probe initramfs: %w", err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		return fmt.Errorf("probe initramfs: %w", err)
	}
	return nil
}

// fileKey identifies files by path, size and modification time.
func fileKey(files ...string) string {
	h := sha256.New()
	for _, f := range files {
		if st, err := os.Stat(f); err == nil {
			fmt.Fprintf(h, "%s:%d:%d;", f, st.Size(), st.ModTime().UnixNano())
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

func hash(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])[:12]
}
