//go:build qemu

// Boots the test guest (QEMU, TCG) from volumes Prepare made: the
// containerDisk overlay (SeaBIOS → syslinux on the disk), a cloud-init ISO,
// an emptyDisk and a hostDisk, all as virtio disks opened with -blockdev.
// Run `bash hack/testguest/build.sh` first, then
// `go test -tags qemu ./launcher/storage/...`.
package storage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/test/testguest"
)

func TestBootPreparedVolumes(t *testing.T) {
	a := artifacts(t)
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Fatal("qemu-system-x86_64 not installed (hack/install-deps.sh installs it)")
	}
	dir := t.TempDir()
	hostDisk := filepath.Join(t.TempDir(), "host", "disk.img")
	const userData = "#cloud-config\nruncmd:\n  - echo kemu storage test\n"
	vmi := vmiWith(
		v1alpha1.Volume{Name: "root", ContainerDisk: &v1alpha1.ContainerDiskSource{Image: "oci-archive:" + a.ContainerDiskOCITar, ImagePullPolicy: corev1.PullIfNotPresent}},
		v1alpha1.Volume{Name: "cloudinit", CloudInitNoCloud: &v1alpha1.CloudInitNoCloudSource{UserData: userData}},
		v1alpha1.Volume{Name: "scratch", EmptyDisk: &v1alpha1.EmptyDiskSource{Capacity: qty("16Mi")}},
		v1alpha1.Volume{Name: "host", HostDisk: &v1alpha1.HostDisk{Path: hostDisk, Type: v1alpha1.HostDiskExistsOrCreate, Capacity: ptr(qty("8Mi"))}},
	)
	vmi.UID = "0d4c0c7e-6a2b-4c55-9a57-6b656d750001"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, err := Prepare(ctx, vmi, Options{Dir: dir, Images: store})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Cleanup()
	base, _ := qemuInfo(t, p.Volumes["root"].Path)["backing-filename"].(string)
	baseSHA := sha256File(t, base)

	args := []string{
		"-machine", "q35,accel=tcg", "-m", "256", "-smp", "1",
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-serial", "stdio",
	}
	for i, name := range []string{"root", "cloudinit", "scratch", "host"} {
		v := p.Volumes[name]
		ro := ""
		if v.ReadOnly {
			ro = ",read-only=on"
		}
		args = append(args,
			"-blockdev", fmt.Sprintf("driver=file,filename=%s,node-name=%s-file%s", v.Path, name, ro),
			"-blockdev", fmt.Sprintf("driver=%s,file=%s-file,node-name=%s%s", v.Format, name, name, ro),
			"-device", fmt.Sprintf("virtio-blk-pci,drive=%s,serial=%s,bootindex=%d", name, name, i+1))
	}
	cmd := exec.Command("qemu-system-x86_64", args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &testguest.SyncBuffer{}
	cmd.Stderr = stderr
	start := time.Now()
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
	boot := wait(testguest.KindBoot)
	if boot.Field("loader") != "syslinux-bios" {
		t.Errorf("boot: %s", boot.Raw)
	}
	ci := wait(testguest.KindCIData)
	if ci.Field("status") != "found" || ci.Field("source") != "nocloud" || ci.Field("fs") != "iso9660" {
		t.Fatalf("cidata: %s", ci.Raw)
	}
	ud := wait(testguest.KindUserData)
	sum := sha256.Sum256([]byte(userData))
	if ud.Field("sha256") != hex.EncodeToString(sum[:]) || ud.Field("size") != fmt.Sprint(len(userData)) {
		t.Errorf("userdata: %s", ud.Raw)
	}
	md := wait(testguest.KindMetaData)
	if md.Field("instance-id") != string(vmi.UID) || md.Field("local-hostname") != "vm1" {
		t.Errorf("metadata: %s", md.Raw)
	}
	for serial, size := range map[string]int64{"scratch": 16 << 20, "host": 8 << 20, "root": p.Volumes["root"].Size} {
		b := wait(testguest.KindBlock, "serial", serial)
		if b.Field("size") != fmt.Sprint(size) || b.Field("bus") != "virtio" {
			t.Errorf("block %s: %s", serial, b.Raw)
		}
	}
	ready := wait(testguest.KindReady)
	t.Logf("ready after %v: %s", time.Since(start).Round(time.Millisecond), ready.Raw)
	if ready.Field("hostname") != "vm1" {
		t.Errorf("hostname: %s", ready.Raw)
	}

	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if sha256File(t, base) != baseSHA {
		t.Error("the cached base changed while the guest ran")
	}
	if err := p.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if left := dirEntries(t, dir); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
	if _, err := os.Stat(hostDisk); err != nil {
		t.Errorf("host disk removed: %v", err)
	}
}
