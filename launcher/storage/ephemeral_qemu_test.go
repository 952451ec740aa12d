//go:build qemu

package storage

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/test/testguest"
)

// TestBootEphemeral: the test guest (kernel boot, TCG) writes to an
// ephemeral volume, a claim's disk.img under the overlay Prepare made; the
// write lands in the overlay, the claim is unchanged, and Cleanup removes
// the overlay (the launcher's cleanup when the VM stops).
func TestBootEphemeral(t *testing.T) {
	a := artifacts(t)
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Fatal("qemu-system-x86_64 not installed (hack/install-deps.sh installs it)")
	}
	dir, pvcRoot := t.TempDir(), t.TempDir()
	claim := filepath.Join(pvcRoot, "golden", PVCDiskImage)
	if err := os.MkdirAll(filepath.Dir(claim), 0o755); err != nil {
		t.Fatal(err)
	}
	base := bytes.Repeat([]byte("kemu-base-image!"), (4<<20)/16)
	if err := os.WriteFile(claim, base, 0o644); err != nil {
		t.Fatal(err)
	}
	const written = "written-by-the-guest"
	// The guest finds the disk by its serial and writes the first sector.
	script := "#!/bin/sh\nset -e\n" +
		"for d in /sys/block/vd*; do [ \"$(cat $d/serial)\" = eph ] && dev=/dev/${d##*/}; done\n" +
		"printf " + written + " | dd of=$dev bs=512 conv=sync,fsync 2>/dev/null\n" +
		"[ \"$(dd if=$dev bs=20 count=1 2>/dev/null)\" = " + written + " ]\n"
	vmi := vmiWith(
		v1alpha1.Volume{Name: "eph", Ephemeral: &v1alpha1.EphemeralVolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "golden"}}},
		v1alpha1.Volume{Name: "cloudinit", CloudInitNoCloud: &v1alpha1.CloudInitNoCloudSource{UserData: script}},
	)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, err := Prepare(ctx, vmi, Options{Dir: dir, PVCRoot: pvcRoot})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Cleanup()
	eph := p.Volumes["eph"]
	if eph.Kind != KindEphemeral || eph.Base != claim || filepath.Dir(eph.Path) != dir {
		t.Fatalf("ephemeral volume: %+v", eph)
	}

	args := []string{
		"-machine", "q35,accel=tcg", "-m", "192", "-smp", "1",
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-serial", "stdio",
		"-kernel", a.Kernel, "-initrd", a.Initrd, "-append", "console=ttyS0 quiet kemu.tick=0",
	}
	for _, name := range []string{"eph", "cloudinit"} {
		v := p.Volumes[name]
		ro := ""
		if v.ReadOnly {
			ro = ",read-only=on"
		}
		// Cache none, as on a node whose file systems take O_DIRECT: the
		// claim under the overlay is opened the same way.
		args = append(args,
			"-blockdev", fmt.Sprintf("driver=file,filename=%s,node-name=%s-file,cache.direct=on%s", v.Path, name, ro),
			"-blockdev", fmt.Sprintf("driver=%s,file=%s-file,node-name=%s,cache.direct=on%s", v.Format, name, name, ro),
			"-device", fmt.Sprintf("virtio-blk-pci,drive=%s,serial=%s", name, name))
	}
	cmd := exec.Command("qemu-system-x86_64", args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &testguest.SyncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("QEMU %v\nstderr: %s", args, stderr.String())
		}
	}()
	w := testguest.NewWatcher(stdout)
	wait := func(kind string, kv ...string) testguest.Marker {
		t.Helper()
		m, err := w.WaitKind(ctx, kind, kv...)
		if err != nil {
			t.Fatalf("%s: %v\nQEMU stderr: %s", kind, err, stderr.String())
		}
		return m
	}
	b := wait(testguest.KindBlock, "serial", "eph")
	if b.Field("size") != fmt.Sprint(len(base)) || b.Field("ro") != "0" {
		t.Errorf("the guest's ephemeral disk: %s", b.Raw)
	}
	if m := wait(testguest.KindUserDataScript, "status", "exited"); m.Field("rc") != "0" {
		t.Fatalf("the guest's write failed: %s", m.Raw)
	}
	// QEMU stops as the launcher stops it: on its own terms (quit,
	// SIGTERM), its block nodes flushed and closed.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Logf("QEMU after SIGTERM: %v", err)
	}

	// The claim is as it was; the guest's write is in the overlay.
	if got, err := os.ReadFile(claim); err != nil || !bytes.Equal(got, base) {
		t.Errorf("the claim changed under the overlay (%v)", err)
	}
	flat := filepath.Join(t.TempDir(), "flat.raw")
	if out, err := exec.Command("qemu-img", "convert", "-U", "-f", "qcow2", "-O", "raw", eph.Path, flat).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img convert: %v\n%s", err, out)
	}
	got, err := os.ReadFile(flat)
	if err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte(written), make([]byte, 512-len(written))...), base[512:]...)
	if !bytes.Equal(got, want) {
		t.Errorf("overlay over the claim reads %q…, want the guest's sector over the claim", got[:32])
	}

	if err := p.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if left := dirEntries(t, dir); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
	if _, err := os.Stat(claim); err != nil {
		t.Errorf("the claim was removed: %v", err)
	}
}
