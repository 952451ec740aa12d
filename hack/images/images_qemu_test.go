//go:build qemu

package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kemu-dev/kemu/launcher"
)

// layout is an unpacked OCI archive.
type layout struct {
	dir      string
	refs     []string
	manifest v1.Manifest
	config   v1.ConfigFile
}

func readLayout(t testing.TB, archive string) layout {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("tar", "-xf", archive, "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("tar -xf %s: %v\n%s", archive, err, out)
	}
	var idx v1.IndexManifest
	readJSON(t, filepath.Join(dir, "index.json"), &idx)
	l := layout{dir: dir}
	for _, m := range idx.Manifests {
		l.refs = append(l.refs, m.Annotations["io.containerd.image.name"])
		if m.Digest != idx.Manifests[0].Digest {
			t.Fatalf("%s: names point at different manifests", archive)
		}
	}
	readJSON(t, l.blob(idx.Manifests[0].Digest), &l.manifest)
	readJSON(t, l.blob(l.manifest.Config.Digest), &l.config)
	return l
}

func (l layout) blob(h v1.Hash) string { return filepath.Join(l.dir, "blobs", h.Algorithm, h.Hex) }

func readJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// unpack extracts the layers in order into a root file system (no
// whiteouts: these images have none) and returns its uncompressed size.
func (l layout) unpack(t testing.TB) (string, int64) {
	t.Helper()
	root := t.TempDir()
	var total int64
	for _, d := range l.manifest.Layers {
		f, err := os.Open(l.blob(d.Digest))
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(zr)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(root, h.Name)
			switch h.Typeflag {
			case tar.TypeDir:
				err = os.MkdirAll(p, os.FileMode(h.Mode).Perm())
				if err == nil {
					err = os.Chmod(p, os.FileMode(h.Mode).Perm()|modeBits(h.Mode))
				}
			case tar.TypeSymlink:
				err = os.Symlink(h.Linkname, p)
			case tar.TypeReg:
				var w *os.File
				w, err = os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode).Perm())
				if err == nil {
					var n int64
					n, err = io.Copy(w, tr)
					total += n
					w.Close()
				}
			default:
				err = fmt.Errorf("unexpected tar entry type %c", h.Typeflag)
			}
			if err != nil {
				t.Fatalf("%s: %v", h.Name, err)
			}
		}
		f.Close()
	}
	return root, total
}

func modeBits(m int64) os.FileMode {
	if m&0o1000 != 0 {
		return os.ModeSticky
	}
	return 0
}

// chroot runs argv inside root and returns its combined output and exit code.
func chroot(t testing.TB, root string, timeout time.Duration, argv ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// With a /proc of its own, as in a container (virtiofsd reads
	// /proc/sys/fs/file-max even for --version), in a private mount
	// namespace that ends with the command.
	if err := os.MkdirAll(filepath.Join(root, "proc"), 0o555); err != nil {
		t.Fatal(err)
	}
	chrootBin, err := exec.LookPath("chroot") // PATH below is the image's
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "unshare", append([]string{"--mount", "--fork", "--mount-proc=" + filepath.Join(root, "proc"), chrootBin, root}, argv...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	}
	t.Fatalf("chroot %v: %v", argv, err)
	return "", -1
}

func buildKemu(t testing.TB, version string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("needs root (chroot)")
	}
	out := t.TempDir()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "run", "./hack/images", "-set", "kemu", "-out", out, "-version", version)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run ./hack/images -set kemu: %v\n%s\n(needs make deps and make testguest)", err, b)
	}
	return out
}

// TestKemuImages builds the kemu images, unpacks each into a root file
// system and runs every program in it with chroot (the image's own loader
// and libraries, nothing from the host): the Go binaries, QEMU and qemu-img,
// and the node agent's KVM probe guest booted by the image's QEMU under TCG
// with its firmware. It also checks names, shared layers and that a second
// build gives the same digests.
func TestKemuImages(t *testing.T) {
	src := sourcesHash(t)
	out := buildKemu(t, "t1")
	ls := map[string]layout{}
	for _, name := range kemuImages {
		l := readLayout(t, filepath.Join(out, name+".oci.tar"))
		ls[name] = l
		want := []string{"kemu.local/" + name + ":t1", "kemu.local/" + name + ":latest"}
		if strings.Join(l.refs, " ") != strings.Join(want, " ") {
			t.Errorf("%s: names %v, want %v", name, l.refs, want)
		}
	}
	// The launcher and the node agent share base + qemu; the controller base.
	la, na, co := ls["kemu-launcher"].manifest.Layers, ls["kemu-nodeagent"].manifest.Layers, ls["kemu-controller"].manifest.Layers
	ap := ls["kemu-api"].manifest.Layers
	if len(la) != 3 || len(na) != 3 || len(co) != 2 || len(ap) != 2 || la[0].Digest != na[0].Digest || la[1].Digest != na[1].Digest ||
		co[0].Digest != la[0].Digest || ap[0].Digest != la[0].Digest {
		t.Errorf("layers not shared as planned: launcher %v nodeagent %v controller %v api %v", la, na, co, ap)
	}

	type run struct {
		argv []string
		code int
		want string
	}
	checks := map[string][]run{
		"kemu-launcher": {
			{[]string{"kemu-launcher", "--help"}, 2, "Usage of kemu-launcher"},
			{[]string{"/usr/bin/kemu-copy"}, 2, "usage: kemu-copy SRC... DSTDIR"},
			{[]string{"kemuctl", "version", "--client"}, 0, "t1"},
			{[]string{"qemu-system-x86_64", "--version"}, 0, "QEMU emulator version"},
			{[]string{"qemu-img", "--version"}, 0, "qemu-img version"},
			{[]string{launcher.DefaultVirtiofsd, "--version"}, 0, "virtiofsd version 7.2"},
			{[]string{launcher.DefaultPasst, "--version"}, 0, "passt"},
			{[]string{launcher.DefaultSwtpm, "--version"}, 0, "TPM emulator version"},
			{[]string{launcher.DefaultSwtpm, "socket", "--tpm2", "--print-capabilities"}, 0, `"tpm-2.0"`},
			{[]string{"qemu-system-x86_64", "-accel", "help"}, 0, "tcg"},
		},
		"kemu-controller": {
			{[]string{"kemu-controller", "--help"}, 2, "-launcher-image"},
		},
		"kemu-api": {
			{[]string{"kemu-api", "--version"}, 0, "kemu-api t1"},
		},
		"kemu-nodeagent": {
			{[]string{"kemu-nodeagent", "--help"}, 2, "-probe-kernel"},
			{[]string{"qemu-system-x86_64", "--version"}, 0, "QEMU emulator version"},
		},
	}
	roots := map[string]string{}
	for name, runs := range checks {
		root, size := ls[name].unpack(t)
		roots[name] = root
		t.Logf("%s: %.1f MiB unpacked", name, float64(size)/(1<<20))
		for _, r := range runs {
			got, code := chroot(t, root, time.Minute, r.argv...)
			if code != r.code || !strings.Contains(got, r.want) {
				t.Errorf("%s: %v: exit %d, want %d with %q; output:\n%s", name, r.argv, code, r.code, r.want, got)
			}
		}
	}
	// Firmware: SeaBIOS, the virtio-net option ROM and OVMF are where QEMU
	// and the launcher look.
	for _, f := range []string{"usr/share/seabios/bios-256k.bin", "usr/lib/ipxe/qemu/efi-virtio.rom",
		"usr/share/OVMF/OVMF_CODE_4M.fd", "usr/share/OVMF/OVMF_VARS_4M.fd", "usr/share/qemu/linuxboot_dma.bin",
		"usr/share/seabios/vgabios-stdvga.bin", "usr/share/qemu/keymaps/en-us", // the VGA device, -vnc
		"etc/ssl/certs/ca-certificates.crt"} {
		if _, err := os.Stat(filepath.Join(roots["kemu-launcher"], f)); err != nil {
			t.Errorf("launcher image: %v", err)
		}
	}

	// The probe guest, booted by the node agent image's own QEMU (q35,
	// SeaBIOS, a virtio NIC with its ROM) to the test guest's ready marker.
	t.Run("probe guest boots", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "chroot", roots["kemu-nodeagent"], "qemu-system-x86_64",
			"-machine", "q35", "-accel", "tcg", "-m", "128", "-nodefaults", "-display", "none", "-serial", "stdio",
			"-kernel", "/usr/share/kemu/probe/vmlinuz", "-initrd", "/usr/share/kemu/probe/initrd.img",
			"-append", "console=ttyS0", "-netdev", "user,id=n0", "-device", "virtio-net-pci,netdev=n0")
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		t0 := time.Now()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Wait() //nolint:errcheck // killed below
		defer cmd.Process.Kill()
		sc := bufio.NewScanner(stdout)
		var tail []string
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "KEMU-GUEST ready") {
				t.Logf("probe guest ready in %s: %s", time.Since(t0).Round(time.Millisecond), sc.Text())
				return
			}
			tail = append(tail, sc.Text())
			if len(tail) > 20 {
				tail = tail[1:]
			}
		}
		t.Fatalf("no ready marker; last output:\n%s\nstderr:\n%s", strings.Join(tail, "\n"), stderr.String())
	})

	t.Run("reproducible", func(t *testing.T) {
		out2 := buildKemu(t, "t1")
		// Other work may edit Go files meanwhile: then only the layers made
		// from host files (base, qemu) must match.
		same := sourcesHash(t) == src
		for _, name := range kemuImages {
			a, b := ls[name], readLayout(t, filepath.Join(out2, name+".oci.tar"))
			if same {
				x, err := os.ReadFile(filepath.Join(out, name+".oci.tar"))
				if err != nil {
					t.Fatal(err)
				}
				y, err := os.ReadFile(filepath.Join(out2, name+".oci.tar"))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(x, y) {
					t.Errorf("%s: two builds of the same sources differ", name)
				}
				continue
			}
			n := len(a.manifest.Layers) - 1
			for i := 0; i < n; i++ {
				if a.manifest.Layers[i].Digest != b.manifest.Layers[i].Digest {
					t.Errorf("%s: layer %d differs between two builds", name, i)
				}
			}
		}
		if !same {
			t.Log("Go sources changed during the test: compared the base and qemu layers only")
		}
	})
}

// sourcesHash hashes every Go file of the module (the binaries' input).
func sourcesHash(t testing.TB) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "_out" || strings.HasPrefix(d.Name(), ".")) && p != root {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "%s %d\n", p, len(b))
			h.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// BenchmarkImages builds the kemu images once (-set kemu, warm Go build
// cache) and reports the build time and each archive's size: compressed
// (what a node pulls or imports), unpacked, and its layer count (make bench,
// images section).
func BenchmarkImages(b *testing.B) {
	t0 := time.Now()
	out := buildKemu(b, "bench")
	build := time.Since(t0)
	b.Run("build", func(b *testing.B) {
		for b.Loop() {
		}
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(build.Seconds(), "s")
	})
	for _, name := range kemuImages {
		st, err := os.Stat(filepath.Join(out, name+".oci.tar"))
		if err != nil {
			b.Fatal(err)
		}
		l := readLayout(b, filepath.Join(out, name+".oci.tar"))
		_, size := l.unpack(b)
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
			}
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(float64(st.Size())/(1<<20), "MiB-archive")
			b.ReportMetric(float64(size)/(1<<20), "MiB-unpacked")
			b.ReportMetric(float64(len(l.manifest.Layers)), "layers")
		})
	}
}
