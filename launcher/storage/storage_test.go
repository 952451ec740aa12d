package storage

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kdomanski/iso9660"
	"github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/launcher/images"
	"github.com/kemu-dev/kemu/test/testguest"
)

// One image cache for the package's tests (extracting the test guest's disk
// once).
var (
	cacheDir string
	store    *images.Store
)

func TestMain(m *testing.M) {
	var err error
	if cacheDir, err = os.MkdirTemp("", "kemu-storage-cache-"); err != nil {
		panic(err)
	}
	if store, err = images.NewStore(cacheDir, ""); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(cacheDir)
	os.Exit(code)
}

func artifacts(t testing.TB) testguest.Artifacts {
	t.Helper()
	a, err := testguest.Paths()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Fatal("qemu-img not installed (hack/install-deps.sh installs qemu-utils)")
	}
	return a
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func sha256File(t testing.TB, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func qemuInfo(t testing.TB, p string) map[string]any {
	t.Helper()
	out, err := exec.Command("qemu-img", "info", "-U", "--output=json", p).Output()
	if err != nil {
		t.Fatalf("qemu-img info %s: %v", p, err)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v: %s", name, args, err, out)
	}
	return string(out)
}

func dirEntries(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func qty(s string) resource.Quantity { return resource.MustParse(s) }

func vmiWith(vols ...v1alpha1.Volume) *v1alpha1.VirtualMachineInstance {
	return &v1alpha1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "vm1", Namespace: "ns1"},
		Spec:       v1alpha1.VirtualMachineInstanceSpec{Volumes: vols},
	}
}

// diskLayout writes an OCI layout whose image holds data at /disk/<name>.
func diskLayout(t testing.TB, name string, data []byte) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "disk/" + name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data))}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		t.Fatal(err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img, err = mutate.Append(img, mutate.Addendum{Layer: l})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestPrepareEveryKind(t *testing.T) {
	a := artifacts(t)
	ctx := ctxT(t)
	dir := t.TempDir()
	host := t.TempDir()
	pvcRoot := t.TempDir()
	secrets := t.TempDir()

	// A raw disk named .qcow2: the format comes from qemu-img, not the name.
	rawData := bytes.Repeat([]byte("raw!"), 256<<10) // 1 MiB
	rawLayout := diskLayout(t, "disk.qcow2", rawData)

	existing := filepath.Join(host, "existing.img")
	if err := os.WriteFile(existing, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	small := filepath.Join(host, "small.img")
	if err := os.WriteFile(small, make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	large := filepath.Join(host, "large.img")
	if err := os.WriteFile(large, make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	created := filepath.Join(host, "new", "sub", "disk.img")
	if err := os.MkdirAll(filepath.Join(pvcRoot, "claim1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pvcRoot, "claim1", "disk.img"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(secrets, "ci-secret"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secrets, "ci-secret", "userdata"), []byte("#cloud-config\nsecret: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	blockClaim := loopDevice(t, filepath.Join(t.TempDir(), "block.img"), 4<<20)
	if blockClaim != "" {
		if err := os.Symlink(blockClaim, filepath.Join(pvcRoot, "blockclaim")); err != nil {
			t.Fatal(err)
		}
	}

	vmi := vmiWith(
		v1alpha1.Volume{Name: "root", ContainerDisk: &v1alpha1.ContainerDiskSource{Image: "oci:" + a.ContainerDiskOCI, ImagePullPolicy: corev1.PullIfNotPresent}},
		v1alpha1.Volume{Name: "rawcd", ContainerDisk: &v1alpha1.ContainerDiskSource{Image: "oci:" + rawLayout, Path: "/disk/disk.qcow2"}},
		v1alpha1.Volume{Name: "ci", CloudInitNoCloud: &v1alpha1.CloudInitNoCloudSource{UserData: "#cloud-config\n", NetworkData: "version: 2\n"}},
		v1alpha1.Volume{Name: "ci2", CloudInitNoCloud: &v1alpha1.CloudInitNoCloudSource{SecretRef: &corev1.LocalObjectReference{Name: "ci-secret"}}},
		v1alpha1.Volume{Name: "scratch", EmptyDisk: &v1alpha1.EmptyDiskSource{Capacity: qty("16Mi")}},
		v1alpha1.Volume{Name: "odd", EmptyDisk: &v1alpha1.EmptyDiskSource{Capacity: qty("1000")}},
		v1alpha1.Volume{Name: "hd-existing", HostDisk: &v1alpha1.HostDisk{Path: existing, Type: v1alpha1.HostDiskExists}},
		v1alpha1.Volume{Name: "hd-new", HostDisk: &v1alpha1.HostDisk{Path: created, Type: v1alpha1.HostDiskExistsOrCreate, Capacity: ptr(qty("64Mi"))}},
		v1alpha1.Volume{Name: "hd-grow", HostDisk: &v1alpha1.HostDisk{Path: small, Type: v1alpha1.HostDiskExistsOrCreate, Capacity: ptr(qty("1Mi"))}},
		v1alpha1.Volume{Name: "hd-keep", HostDisk: &v1alpha1.HostDisk{Path: large, Type: v1alpha1.HostDiskExistsOrCreate, Capacity: ptr(qty("1Ki"))}},
		v1alpha1.Volume{Name: "pvc", PersistentVolumeClaim: &v1alpha1.PersistentVolumeClaimVolumeSource{ClaimName: "claim1", ReadOnly: true}},
		v1alpha1.Volume{Name: "eph", Ephemeral: &v1alpha1.EphemeralVolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "claim1"}}},
		v1alpha1.Volume{Name: "dv", DataVolume: &v1alpha1.DataVolumeSource{Name: "claim1"}},
	)
	if blockClaim != "" {
		vmi.Spec.Volumes = append(vmi.Spec.Volumes, v1alpha1.Volume{Name: "blk",
			PersistentVolumeClaim: &v1alpha1.PersistentVolumeClaimVolumeSource{ClaimName: "blockclaim"}},
			v1alpha1.Volume{Name: "dv-blk", DataVolume: &v1alpha1.DataVolumeSource{Name: "blockclaim"}},
			v1alpha1.Volume{Name: "eph-blk", Ephemeral: &v1alpha1.EphemeralVolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "blockclaim"}}})
	}
	vmi.Spec.Domain.Firmware = &v1alpha1.Firmware{KernelBoot: &v1alpha1.KernelBoot{Container: &v1alpha1.KernelBootContainer{
		Image: "oci-archive:" + a.KernelBootOCITar, KernelPath: "/boot/vmlinuz", InitrdPath: "/boot/initrd.img"}}}

	start := time.Now()
	p, err := Prepare(ctx, vmi, Options{Dir: dir, Images: store, PVCRoot: pvcRoot, SecretsDir: secrets})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Prepare (%d volumes + kernel boot, cold cache): %v", len(vmi.Spec.Volumes), time.Since(start))
	if len(p.Volumes) != len(vmi.Spec.Volumes) {
		t.Errorf("%d volumes prepared, want %d", len(p.Volumes), len(vmi.Spec.Volumes))
	}

	// containerDisk: a qcow2 overlay on the read-only cached base.
	root := p.Volumes["root"]
	if root.Kind != KindContainerDisk || root.Format != FormatQCOW2 || root.Path != filepath.Join(dir, "root.qcow2") || root.ReadOnly || root.Block {
		t.Errorf("root: %+v", root)
	}
	baseSize := int64(qemuInfo(t, a.Disk)["virtual-size"].(float64))
	if root.Size != baseSize {
		t.Errorf("root size %d, want the base's virtual size %d", root.Size, baseSize)
	}
	info := qemuInfo(t, root.Path)
	base, _ := info["backing-filename"].(string)
	if info["format"] != "qcow2" || info["backing-filename-format"] != "qcow2" || !strings.HasPrefix(base, cacheDir) {
		t.Errorf("overlay info: %v", info)
	}
	if root.Base != base || root.BaseFormat != FormatQCOW2 {
		t.Errorf("root: base %s (%s), overlay backing file %s", root.Base, root.BaseFormat, base)
	}
	if st, err := os.Stat(base); err != nil || st.Mode().Perm() != 0o444 {
		t.Errorf("base %s: %v %v", base, st.Mode(), err)
	}
	baseSHA := sha256File(t, base)
	if baseSHA != sha256File(t, a.Disk) {
		t.Error("cached base differs from the test guest's disk")
	}
	// Write through the overlay: the base must not change.
	run(t, "qemu-io", "-f", "qcow2", "-c", "write -P 0xab 0 1M", "-c", "write -P 0xcd 60M 64k", root.Path)
	run(t, "qemu-io", "-f", "qcow2", "-c", "read -P 0xab 0 1M", "-c", "read -P 0xcd 60M 64k", root.Path)
	if sha256File(t, base) != baseSHA {
		t.Error("writing through the overlay changed the base")
	}

	rawcd := p.Volumes["rawcd"]
	if info := qemuInfo(t, rawcd.Path); info["backing-filename-format"] != "raw" || rawcd.Size != int64(len(rawData)) ||
		rawcd.Format != FormatQCOW2 || rawcd.BaseFormat != FormatRaw {
		t.Errorf("raw containerDisk: %+v, overlay %v", rawcd, info)
	}
	run(t, "qemu-io", "-f", "qcow2", "-c", "read -P 0x72 0 1", "-c", "read -P 0x21 3 1", rawcd.Path) // "r" ... "!"

	// cloud-init.
	ci := p.Volumes["ci"]
	if ci.Kind != KindCloudInitNoCloud || ci.Path != filepath.Join(dir, "ci-cidata.iso") || ci.Format != FormatRaw || !ci.ReadOnly || ci.Size == 0 {
		t.Errorf("ci: %+v", ci)
	}
	files := isoFiles(t, ci.Path)
	if files["user-data"] != "#cloud-config\n" || files["network-config"] != "version: 2\n" ||
		files["meta-data"] != "instance-id: ns1.vm1\nlocal-hostname: vm1\n" {
		t.Errorf("ci ISO: %q", files)
	}
	if files := isoFiles(t, p.Volumes["ci2"].Path); files["user-data"] != "#cloud-config\nsecret: 1\n" {
		t.Errorf("ci2 ISO: %q", files)
	}

	// emptyDisks.
	for name, want := range map[string]int64{"scratch": 16 << 20, "odd": 1024} {
		v := p.Volumes[name]
		if v.Kind != KindEmptyDisk || v.Format != FormatQCOW2 || v.Size != want || v.Path != filepath.Join(dir, name+".qcow2") {
			t.Errorf("%s: %+v", name, v)
		}
		info := qemuInfo(t, v.Path)
		if int64(info["virtual-size"].(float64)) != want || info["format"] != "qcow2" || info["backing-filename"] != nil {
			t.Errorf("%s: qemu-img info %v", name, info)
		}
	}

	// hostDisks.
	if v := p.Volumes["hd-existing"]; v.Path != existing || v.Format != FormatRaw || v.Size != 5 || v.Block || v.Kind != KindHostDisk {
		t.Errorf("hd-existing: %+v", v)
	}
	hdNew := p.Volumes["hd-new"]
	if hdNew.Path != created || hdNew.Size != 64<<20 || hdNew.Format != FormatRaw {
		t.Errorf("hd-new: %+v", hdNew)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(created, &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != 64<<20 || st.Blocks*512 > 64<<10 {
		t.Errorf("created hostDisk: size %d, %d bytes allocated (not sparse)", st.Size, st.Blocks*512)
	}
	if v := p.Volumes["hd-grow"]; v.Size != 1<<20 {
		t.Errorf("hd-grow: %+v", v)
	}
	if st, _ := os.Stat(small); st.Size() != 1<<20 {
		t.Errorf("small host disk not grown: %d", st.Size())
	}
	if st, _ := os.Stat(large); st.Size() != 4096 || p.Volumes["hd-keep"].Size != 4096 {
		t.Errorf("larger host disk changed: %d, %+v", st.Size(), p.Volumes["hd-keep"])
	}

	// PVCs.
	if v := p.Volumes["pvc"]; v.Path != filepath.Join(pvcRoot, "claim1", "disk.img") || !v.ReadOnly || v.Format != FormatRaw || v.Size != 1<<20 || v.Block {
		t.Errorf("pvc: %+v", v)
	}
	// dataVolume: the PVC of the DataVolume's name, read-write.
	if v := p.Volumes["dv"]; v.Kind != KindDataVolume || v.Path != filepath.Join(pvcRoot, "claim1", "disk.img") || v.ReadOnly ||
		v.Format != FormatRaw || v.Size != 1<<20 || v.Block {
		t.Errorf("dv: %+v", v)
	}
	if blockClaim != "" {
		if v := p.Volumes["blk"]; !v.Block || v.Size != 4<<20 || v.Path != filepath.Join(pvcRoot, "blockclaim") || v.ReadOnly {
			t.Errorf("blk: %+v", v)
		}
		if v := p.Volumes["dv-blk"]; v.Kind != KindDataVolume || !v.Block || v.Size != 4<<20 || v.Path != filepath.Join(pvcRoot, "blockclaim") || v.ReadOnly {
			t.Errorf("dv-blk: %+v", v)
		}
	}

	// Ephemeral: a writable qcow2 overlay in the VM's directory over the
	// claim, read as raw (a file or a block device).
	ephemerals := map[string]struct {
		base  string
		size  int64
		block bool
	}{"eph": {filepath.Join(pvcRoot, "claim1", "disk.img"), 1 << 20, false}}
	if blockClaim != "" {
		ephemerals["eph-blk"] = struct {
			base  string
			size  int64
			block bool
		}{filepath.Join(pvcRoot, "blockclaim"), 4 << 20, true}
	}
	for name, want := range ephemerals {
		v := p.Volumes[name]
		if v.Kind != KindEphemeral || v.Path != filepath.Join(dir, name+".qcow2") || v.Format != FormatQCOW2 || v.ReadOnly || v.Block ||
			v.Size != want.size || v.Base != want.base || v.BaseFormat != FormatRaw || v.BaseBlock != want.block {
			t.Errorf("%s: %+v", name, v)
		}
		info := qemuInfo(t, v.Path)
		if info["format"] != "qcow2" || info["backing-filename"] != want.base || info["backing-filename-format"] != "raw" ||
			int64(info["virtual-size"].(float64)) != want.size {
			t.Errorf("%s: overlay info %v", name, info)
		}
	}

	// Kernel boot.
	if p.Kernel == nil || sha256File(t, p.Kernel.Kernel) != sha256File(t, a.Kernel) || sha256File(t, p.Kernel.Initrd) != sha256File(t, a.Initrd) {
		t.Errorf("kernel boot: %+v", p.Kernel)
	}

	// Cleanup removes the VM's files only.
	if err := p.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if left := dirEntries(t, dir); len(left) != 0 {
		t.Errorf("left in the VM directory: %v", left)
	}
	for _, f := range []string{existing, created, small, filepath.Join(pvcRoot, "claim1", "disk.img"), base, p.Kernel.Kernel} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("Cleanup removed %s: %v", f, err)
		}
	}
	if err := p.Cleanup(); err != nil {
		t.Errorf("second Cleanup: %v", err)
	}

	// Prepare again with a warm cache (the overlay is recreated).
	start = time.Now()
	p2, err := Prepare(ctx, vmiWith(vmi.Spec.Volumes[0]), Options{Dir: dir, Images: store})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Prepare (containerDisk, warm cache): %v", time.Since(start))
	// A fresh overlay: the guest sees the base again, not the writes above.
	run(t, "qemu-img", "compare", "-U", "-f", "qcow2", "-F", "qcow2", p2.Volumes["root"].Path, a.Disk)
	if err := p2.Cleanup(); err != nil {
		t.Fatal(err)
	}
}

// The guest must not see a previous run's writes: a stale overlay is replaced.
func TestStaleOverlayReplaced(t *testing.T) {
	a := artifacts(t)
	dir := t.TempDir()
	stale := filepath.Join(dir, "root.qcow2")
	if err := os.WriteFile(stale, []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := Prepare(ctxT(t), vmiWith(v1alpha1.Volume{Name: "root", ContainerDisk: &v1alpha1.ContainerDiskSource{Image: "oci:" + a.ContainerDiskOCI}}),
		Options{Dir: dir, Images: store})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Cleanup()
	if info := qemuInfo(t, stale); info["format"] != "qcow2" {
		t.Errorf("stale overlay kept: %v", info)
	}
}

func ptr[T any](v T) *T { return &v }

func isoFiles(t *testing.T, p string) map[string]string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := iso9660.OpenImage(f)
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := img.Label(); l != "cidata" {
		t.Errorf("%s: label %q", p, l)
	}
	root, err := img.RootDir()
	if err != nil {
		t.Fatal(err)
	}
	children, err := root.GetChildren()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, c := range children {
		b, _ := io.ReadAll(c.Reader())
		m[c.Name()] = string(b)
	}
	return m
}

// loopDevice attaches a file of size bytes to a loop device, or returns ""
// (the block-claim checks are skipped) when that is not possible here.
func loopDevice(t *testing.T, file string, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		return ""
	}
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(file, size); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "-f", "--show", file).Output()
	if err != nil {
		t.Logf("no loop device (%v): block claims not tested", err)
		return ""
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("losetup", "-d", dev).Run() })
	return dev
}

func TestPrepareErrors(t *testing.T) {
	a := artifacts(t)
	host := t.TempDir()
	pvcRoot := t.TempDir()
	regular := filepath.Join(host, "regular")
	if err := os.WriteFile(regular, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(pvcRoot, "nodisk"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Unsafe or unsupported containerDisks.
	backed := filepath.Join(t.TempDir(), "backed.qcow2")
	run(t, "qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", regular, backed, "1M")
	backedData, _ := os.ReadFile(backed)
	dataFile := filepath.Join(t.TempDir(), "datafile.qcow2")
	run(t, "qemu-img", "create", "-q", "-f", "qcow2", "-o", "data_file="+filepath.Join(t.TempDir(), "data.raw"), dataFile, "1M")
	dataFileData, _ := os.ReadFile(dataFile)
	vmdk := filepath.Join(t.TempDir(), "x.vmdk")
	run(t, "qemu-img", "create", "-q", "-f", "vmdk", vmdk, "1M")
	vmdkData, _ := os.ReadFile(vmdk)
	cd := func(image, path string) v1alpha1.Volume {
		return v1alpha1.Volume{Name: "cd", ContainerDisk: &v1alpha1.ContainerDiskSource{Image: image, Path: path}}
	}
	hd := func(path string, typ v1alpha1.HostDiskType, capacity string) v1alpha1.Volume {
		h := &v1alpha1.HostDisk{Path: path, Type: typ}
		if capacity != "" {
			h.Capacity = ptr(qty(capacity))
		}
		return v1alpha1.Volume{Name: "hd", HostDisk: h}
	}
	good := v1alpha1.Volume{Name: "scratch", EmptyDisk: &v1alpha1.EmptyDiskSource{Capacity: qty("1Mi")}}

	for _, tc := range []struct {
		name  string
		vols  []v1alpha1.Volume
		kb    *v1alpha1.KernelBootContainer
		opts  func(*Options)
		field string
		text  string
	}{
		{name: "hostDisk Disk missing", vols: []v1alpha1.Volume{good, hd(filepath.Join(host, "missing.img"), v1alpha1.HostDiskExists, "")},
			field: "spec.volumes[1].hostDisk.path", text: "does not exist"},
		{name: "hostDisk under a regular file", vols: []v1alpha1.Volume{hd(filepath.Join(regular, "sub", "disk.img"), v1alpha1.HostDiskExistsOrCreate, "1Mi")},
			field: "spec.volumes[0].hostDisk.path", text: "not a directory"},
		{name: "hostDisk Disk under a regular file", vols: []v1alpha1.Volume{hd(filepath.Join(regular, "disk.img"), v1alpha1.HostDiskExists, "")},
			field: "spec.volumes[0].hostDisk.path", text: "does not exist"},
		{name: "hostDisk no capacity", vols: []v1alpha1.Volume{hd(filepath.Join(host, "new.img"), v1alpha1.HostDiskExistsOrCreate, "")},
			field: "spec.volumes[0].hostDisk.capacity", text: "required"},
		{name: "hostDisk zero capacity", vols: []v1alpha1.Volume{hd(filepath.Join(host, "new.img"), v1alpha1.HostDiskExistsOrCreate, "0")},
			field: "spec.volumes[0].hostDisk.capacity", text: "must be positive"},
		{name: "hostDisk relative", vols: []v1alpha1.Volume{hd("rel/disk.img", v1alpha1.HostDiskExistsOrCreate, "1Mi")},
			field: "spec.volumes[0].hostDisk.path", text: "not an absolute path"},
		{name: "hostDisk directory", vols: []v1alpha1.Volume{hd(host, v1alpha1.HostDiskExists, "")},
			field: "spec.volumes[0].hostDisk.path", text: "is a directory"},
		{name: "hostDisk char device", vols: []v1alpha1.Volume{hd("/dev/null", v1alpha1.HostDiskExists, "")},
			field: "spec.volumes[0].hostDisk.path", text: "not a regular file or block device"},
		{name: "hostDisk bad type", vols: []v1alpha1.Volume{hd(regular, "Maybe", "")},
			field: "spec.volumes[0].hostDisk.type", text: `unknown type "Maybe"`},
		{name: "pvc missing", vols: []v1alpha1.Volume{good, {Name: "p", PersistentVolumeClaim: &v1alpha1.PersistentVolumeClaimVolumeSource{ClaimName: "nope"}}},
			field: "spec.volumes[1].persistentVolumeClaim.claimName", text: `claim "nope" not found`},
		{name: "pvc without disk.img", vols: []v1alpha1.Volume{{Name: "p", PersistentVolumeClaim: &v1alpha1.PersistentVolumeClaimVolumeSource{ClaimName: "nodisk"}}},
			field: "spec.volumes[0].persistentVolumeClaim.claimName", text: "has no disk.img"},
		{name: "pvc bad name", vols: []v1alpha1.Volume{{Name: "p", PersistentVolumeClaim: &v1alpha1.PersistentVolumeClaimVolumeSource{ClaimName: "../x"}}},
			field: "spec.volumes[0].persistentVolumeClaim.claimName", text: "invalid claim name"},
		{name: "dataVolume's PVC missing", vols: []v1alpha1.Volume{good, {Name: "d", DataVolume: &v1alpha1.DataVolumeSource{Name: "nope"}}},
			field: "spec.volumes[1].dataVolume.name", text: `claim "nope" not found`},
		{name: "dataVolume's PVC without disk.img", vols: []v1alpha1.Volume{{Name: "d", DataVolume: &v1alpha1.DataVolumeSource{Name: "nodisk"}}},
			field: "spec.volumes[0].dataVolume.name", text: "has no disk.img"},
		{name: "pvc no root", vols: []v1alpha1.Volume{{Name: "p", PersistentVolumeClaim: &v1alpha1.PersistentVolumeClaimVolumeSource{ClaimName: "x"}}},
			opts: func(o *Options) { o.PVCRoot = "" }, field: "spec.volumes[0].persistentVolumeClaim.claimName", text: "no claim directory"},
		{name: "containerDisk missing image", vols: []v1alpha1.Volume{good, cd("oci:/nonexistent/layout", "")},
			field: "spec.volumes[1].containerDisk.image", text: "no such file or directory"},
		{name: "containerDisk missing path", vols: []v1alpha1.Volume{cd("oci:"+a.ContainerDiskOCI, "/disk/other.qcow2")},
			field: "spec.volumes[0].containerDisk.path", text: "no such file in the image: /disk/other.qcow2"},
		{name: "containerDisk not cached, Never", vols: []v1alpha1.Volume{{Name: "cd", ContainerDisk: &v1alpha1.ContainerDiskSource{
			Image: "127.0.0.1:1/nope:v1", ImagePullPolicy: corev1.PullNever}}},
			field: "spec.volumes[0].containerDisk.image", text: "not present in the local cache"},
		{name: "containerDisk with backing file", vols: []v1alpha1.Volume{cd("oci:"+diskLayout(t, "d.qcow2", backedData), "")},
			field: "spec.volumes[0].containerDisk.image", text: "has a backing file"},
		{name: "containerDisk with an external data file", vols: []v1alpha1.Volume{cd("oci:"+diskLayout(t, "d.qcow2", dataFileData), "")},
			field: "spec.volumes[0].containerDisk.image", text: "has an external data file"},
		{name: "containerDisk vmdk", vols: []v1alpha1.Volume{cd("oci:"+diskLayout(t, "d.img", vmdkData), "")},
			field: "spec.volumes[0].containerDisk.image", text: `format "vmdk" is not supported`},
		{name: "containerDisk no store", vols: []v1alpha1.Volume{cd("oci:"+a.ContainerDiskOCI, "")},
			opts: func(o *Options) { o.Images = nil }, field: "spec.volumes[0].containerDisk.image", text: "no image store"},
		{name: "qemu-img missing", vols: []v1alpha1.Volume{cd("oci:"+a.ContainerDiskOCI, "")},
			opts: func(o *Options) { o.QemuImg = "/nonexistent/qemu-img" }, field: "spec.volumes[0].containerDisk.image", text: "/nonexistent/qemu-img"},
		{name: "cloud-init bad base64", vols: []v1alpha1.Volume{good, {Name: "ci", CloudInitNoCloud: &v1alpha1.CloudInitNoCloudSource{UserDataBase64: "@@@"}}},
			field: "spec.volumes[1].cloudInitNoCloud.userDataBase64", text: "invalid base64"},
		{name: "cloud-init missing secret", vols: []v1alpha1.Volume{{Name: "ci", CloudInitNoCloud: &v1alpha1.CloudInitNoCloudSource{SecretRef: &corev1.LocalObjectReference{Name: "s"}}}},
			field: "spec.volumes[0].cloudInitNoCloud.secretRef.name", text: `secret "s" not found`},
		{name: "emptyDisk zero", vols: []v1alpha1.Volume{{Name: "e", EmptyDisk: &v1alpha1.EmptyDiskSource{Capacity: qty("0")}}},
			field: "spec.volumes[0].emptyDisk.capacity", text: "must be positive"},
		{name: "duplicate name", vols: []v1alpha1.Volume{good, good},
			field: "spec.volumes[1].name", text: "already used by spec.volumes[0]"},
		{name: "bad name", vols: []v1alpha1.Volume{{Name: "../x", EmptyDisk: &v1alpha1.EmptyDiskSource{Capacity: qty("1Mi")}}},
			field: "spec.volumes[0].name", text: "invalid volume name"},
		{name: "no source", vols: []v1alpha1.Volume{good, {Name: "dm", MemoryDump: &v1alpha1.Unsupported{}}},
			field: "spec.volumes[1]", text: "no supported source"},
		{name: "kernel path missing", vols: []v1alpha1.Volume{good},
			kb:    &v1alpha1.KernelBootContainer{Image: "oci:" + a.KernelBootOCI, KernelPath: "/boot/nope"},
			field: "spec.domain.firmware.kernelBoot.container.kernelPath", text: "no such file in the image: /boot/nope"},
		{name: "kernel image missing", vols: []v1alpha1.Volume{good},
			kb:    &v1alpha1.KernelBootContainer{Image: "oci:/nonexistent", KernelPath: "/boot/vmlinuz"},
			field: "spec.domain.firmware.kernelBoot.container.image", text: "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			vmi := vmiWith(tc.vols...)
			if tc.kb != nil {
				vmi.Spec.Domain.Firmware = &v1alpha1.Firmware{KernelBoot: &v1alpha1.KernelBoot{Container: tc.kb}}
			}
			opts := Options{Dir: dir, Images: store, PVCRoot: pvcRoot, SecretsDir: t.TempDir()}
			if tc.opts != nil {
				tc.opts(&opts)
			}
			p, err := Prepare(ctxT(t), vmi, opts)
			if err == nil {
				// What qemu-img finds while QEMU starts (the launcher
				// then cleans up as after any failed start).
				err = p.Verify(ctxT(t))
				p.Cleanup()
			}
			if err == nil {
				t.Fatal("no error")
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(err.Error(), tc.text) ||
				!strings.HasPrefix(err.Error(), tc.field+": ") {
				t.Errorf("error:\n  %v\nwant field %s and %q", err, tc.field, tc.text)
			}
			if left := dirEntries(t, dir); len(left) != 0 {
				t.Errorf("left in the VM directory: %v", left)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(regular)); err != nil {
		t.Error(err)
	}
	if entries := dirEntries(t, host); len(entries) != 1 {
		t.Errorf("host directory: %v, want only the regular file", entries)
	}
}

// A bad image in the 3rd volume after two succeeded: nothing is left behind,
// including host disks and directories Prepare created, and no host disk is
// grown.
func TestPrepareRollback(t *testing.T) {
	a := artifacts(t)
	dir := t.TempDir()
	host := t.TempDir()
	small := filepath.Join(host, "small.img")
	if err := os.WriteFile(small, make([]byte, 512), 0o644); err != nil {
		t.Fatal(err)
	}
	vmi := vmiWith(
		v1alpha1.Volume{Name: "root", ContainerDisk: &v1alpha1.ContainerDiskSource{Image: "oci:" + a.ContainerDiskOCI}},
		v1alpha1.Volume{Name: "scratch", EmptyDisk: &v1alpha1.EmptyDiskSource{Capacity: qty("8Mi")}},
		v1alpha1.Volume{Name: "bad", ContainerDisk: &v1alpha1.ContainerDiskSource{Image: "oci-archive:" + filepath.Join(host, "missing.tar")}},
	)
	_, err := Prepare(ctxT(t), vmi, Options{Dir: dir, Images: store})
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "spec.volumes[2].containerDisk.image" {
		t.Fatalf("error %v", err)
	}
	if left := dirEntries(t, dir); len(left) != 0 {
		t.Errorf("left in the VM directory: %v", left)
	}

	// With host disks and a cloud-init ISO before the failure.
	vmi.Spec.Volumes = append([]v1alpha1.Volume{
		{Name: "ci", CloudInitNoCloud: &v1alpha1.CloudInitNoCloudSource{UserData: "x"}},
		{Name: "new", HostDisk: &v1alpha1.HostDisk{Path: filepath.Join(host, "a", "b", "new.img"), Type: v1alpha1.HostDiskExistsOrCreate, Capacity: ptr(qty("1Mi"))}},
		{Name: "grow", HostDisk: &v1alpha1.HostDisk{Path: small, Type: v1alpha1.HostDiskExistsOrCreate, Capacity: ptr(qty("1Mi"))}},
	}, vmi.Spec.Volumes...)
	if _, err := Prepare(ctxT(t), vmi, Options{Dir: dir, Images: store}); err == nil || !strings.HasPrefix(err.Error(), "spec.volumes[5].containerDisk.image: ") {
		t.Fatalf("error %v", err)
	}
	if left := dirEntries(t, dir); len(left) != 0 {
		t.Errorf("left in the VM directory: %v", left)
	}
	if left := dirEntries(t, host); len(left) != 1 || left[0] != "small.img" {
		t.Errorf("left in the host directory: %v", left)
	}
	if st, _ := os.Stat(small); st.Size() != 512 {
		t.Errorf("host disk grown by a failed Prepare: %d", st.Size())
	}
}

func TestPrepareNoVolumes(t *testing.T) {
	p, err := Prepare(context.Background(), vmiWith(), Options{Dir: t.TempDir()})
	if err != nil || len(p.Volumes) != 0 || p.Kernel != nil {
		t.Fatalf("%+v %v", p, err)
	}
	if err := p.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if _, err := Prepare(context.Background(), vmiWith(), Options{Dir: filepath.Join(t.TempDir(), "missing")}); err == nil {
		t.Error("missing VM directory: no error")
	}
	var nilP *Prepared
	if err := nilP.Cleanup(); err != nil {
		t.Error(err)
	}
}

// A VMI name that is no host name (dots, more than 63 characters) gives
// cloud-init the launcher Pod's host name (v1alpha1.DeriveHostname).
func TestCloudInitHostname(t *testing.T) {
	for name, want := range map[string]string{
		"vm1":                                 "vm1",
		"web.example.com":                     "web",
		strings.Repeat("l", 100) + ".example": strings.Repeat("l", 63),
	} {
		vmi := vmiWith(v1alpha1.Volume{Name: "ci", CloudInitNoCloud: &v1alpha1.CloudInitNoCloudSource{UserData: "#cloud-config\n"}})
		vmi.Name, vmi.UID = name, "6a1f3c2e-1b2d-4e5f-8a9b-0c1d2e3f4a5b"
		p, err := Prepare(context.Background(), vmi, Options{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		files := isoFiles(t, p.Volumes["ci"].Path)
		if files["meta-data"] != "instance-id: 6a1f3c2e-1b2d-4e5f-8a9b-0c1d2e3f4a5b\nlocal-hostname: "+want+"\n" {
			t.Errorf("VMI %q: meta-data %q, want local-hostname %q", name, files["meta-data"], want)
		}
		if err := p.Cleanup(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestInstanceID(t *testing.T) {
	vmi := vmiWith()
	if got := InstanceID(vmi); got != "ns1.vm1" {
		t.Errorf("%q", got)
	}
	vmi.Namespace = ""
	if got := InstanceID(vmi); got != "default.vm1" {
		t.Errorf("%q", got)
	}
	vmi.UID = "6a1f3c2e-1b2d-4e5f-8a9b-0c1d2e3f4a5b"
	if got := InstanceID(vmi); got != "6a1f3c2e-1b2d-4e5f-8a9b-0c1d2e3f4a5b" {
		t.Errorf("%q", got)
	}
}

// Disks copied out of their images by the Pod's init containers
// (Options.ContainerDiskDir) are used in place of the image store.
func TestContainerDiskDir(t *testing.T) {
	artifacts(t)
	cdDir := t.TempDir()
	for _, f := range []string{"root/disk.qcow2", "two/a.img", "two/b.img", "picked/x.raw", "picked/y.raw"} {
		p := filepath.Join(cdDir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		run(t, "qemu-img", "create", "-q", "-f", map[bool]string{true: "qcow2", false: "raw"}[strings.HasSuffix(f, ".qcow2")], p, "1M")
	}
	// A partial copy kemu-copy left behind is ignored.
	if err := os.WriteFile(filepath.Join(cdDir, "root", ".disk.qcow2.123"), []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}
	cd := func(name, path string) v1alpha1.Volume {
		return v1alpha1.Volume{Name: name, ContainerDisk: &v1alpha1.ContainerDiskSource{
			Image: "registry.example/never-pulled:1", Path: path}}
	}
	prep := func(vols ...v1alpha1.Volume) (*Prepared, error) {
		return Prepare(ctxT(t), vmiWith(vols...), Options{Dir: t.TempDir(), ContainerDiskDir: cdDir})
	}
	p, err := prep(cd("root", ""), cd("picked", "/disk/y.raw"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Cleanup()
	if b := p.Volumes["root"].Base; b != filepath.Join(cdDir, "root", "disk.qcow2") || p.Volumes["root"].BaseFormat != FormatQCOW2 {
		t.Errorf("root based on %s (%s)", b, p.Volumes["root"].BaseFormat)
	}
	if b := p.Volumes["picked"].Base; b != filepath.Join(cdDir, "picked", "y.raw") || p.Volumes["picked"].BaseFormat != FormatRaw {
		t.Errorf("picked based on %s (%s)", b, p.Volumes["picked"].BaseFormat)
	}
	for _, tc := range []struct {
		vol       v1alpha1.Volume
		field, in string
	}{
		{cd("two", ""), "spec.volumes[0].containerDisk.image", "holds 2 files: set path"},
		{cd("missing", ""), "spec.volumes[0].containerDisk.image", "no disk copied"},
		{cd("root", "/disk/other.qcow2"), "spec.volumes[0].containerDisk.path", "was not copied out of the image"},
	} {
		_, err := prep(tc.vol)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(err.Error(), tc.in) {
			t.Errorf("volume %s path %q: %v; want %s: …%s…", tc.vol.Name, tc.vol.ContainerDisk.Path, err, tc.field, tc.in)
		}
	}
}

// A kernel and initrd copied out of the kernel-boot image by the Pod's init
// container (Options.KernelBootDir) are used without pulling the image.
func TestKernelBootDir(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"vmlinuz", "initrd.img"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(f), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	vmi := func(kernel, initrd string) *v1alpha1.VirtualMachineInstance {
		v := vmiWith()
		v.Spec.Domain.Firmware = &v1alpha1.Firmware{KernelBoot: &v1alpha1.KernelBoot{Container: &v1alpha1.KernelBootContainer{
			Image: "registry.example/never-pulled:1", KernelPath: kernel, InitrdPath: initrd}}}
		return v
	}
	p, err := Prepare(ctxT(t), vmi("/boot/vmlinuz", "/boot/initrd.img"), Options{Dir: t.TempDir(), KernelBootDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Cleanup()
	if k := p.Kernel; k == nil || k.Kernel != filepath.Join(dir, "vmlinuz") || k.Initrd != filepath.Join(dir, "initrd.img") {
		t.Fatalf("kernel boot %+v", p.Kernel)
	}
	_, err = Prepare(ctxT(t), vmi("/boot/bzImage", ""), Options{Dir: t.TempDir(), KernelBootDir: dir})
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "spec.domain.firmware.kernelBoot.container.kernelPath" || !strings.Contains(err.Error(), "not copied out of the image") {
		t.Fatalf("missing kernel: %v", err)
	}
}
