package images

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	corev1 "k8s.io/api/core/v1"

	"github.com/kemu-dev/kemu/test/testguest"
)

func artifacts(t testing.TB) testguest.Artifacts {
	t.Helper()
	a, err := testguest.Paths()
	if err != nil {
		t.Fatal(err)
	}
	return a
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

func newStore(t testing.TB, baseDir string) *Store {
	t.Helper()
	s, err := NewStore(t.TempDir(), baseDir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// checkCached checks a returned file: inside the cache, read-only, content.
func checkCached(t *testing.T, s *Store, p, wantSHA string) {
	t.Helper()
	if !strings.HasPrefix(p, s.Dir()+string(filepath.Separator)) {
		t.Errorf("%s is not in the cache %s", p, s.Dir())
	}
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o444 {
		t.Errorf("%s: mode %v, want 0444", p, st.Mode())
	}
	if got := sha256File(t, p); got != wantSHA {
		t.Errorf("%s: sha256 %s, want %s", p, got, wantSHA)
	}
}

func TestDiskFileLocalReferences(t *testing.T) {
	a := artifacts(t)
	want := sha256File(t, a.Disk)
	for _, ref := range []string{
		"oci:" + a.ContainerDiskOCI,
		"oci-archive:" + a.ContainerDiskOCITar,
		"docker-archive:" + a.ContainerDiskDockerTar,
	} {
		t.Run(strings.SplitN(ref, ":", 2)[0], func(t *testing.T) {
			t.Parallel()
			s := newStore(t, "")
			ctx := ctxT(t)
			start := time.Now()
			p, err := s.DiskFile(ctx, ref, corev1.PullNever, "")
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("first DiskFile: %v", time.Since(start))
			checkCached(t, s, p, want)
			if filepath.Base(p) != "disk.qcow2" {
				t.Errorf("cached as %s, want the image's file name", p)
			}
			st1, _ := os.Stat(p)

			start = time.Now()
			for _, path := range []string{"", "/disk/disk.qcow2", "disk/disk.qcow2", "/disk/../disk/./disk.qcow2"} {
				p2, err := s.DiskFile(ctx, ref, corev1.PullAlways, path)
				if err != nil {
					t.Fatalf("path %q: %v", path, err)
				}
				if p2 != p {
					t.Errorf("path %q: %s, want the cached %s", path, p2, p)
				}
			}
			t.Logf("4 cached DiskFile calls: %v", time.Since(start))
			if n := s.extractions.Load(); n != 1 {
				t.Errorf("%d extractions, want 1 (cache not reused)", n)
			}
			st2, _ := os.Stat(p)
			if !st1.ModTime().Equal(st2.ModTime()) {
				t.Errorf("cached file rewritten: mtime %v → %v", st1.ModTime(), st2.ModTime())
			}
		})
	}
}

// The three transports carry the same image (same config), so they share
// the cache.
func TestSameImageSharedAcrossTransports(t *testing.T) {
	a := artifacts(t)
	s := newStore(t, a.Dir)
	ctx := ctxT(t)
	var paths []string
	for _, ref := range []string{
		"oci:oci/containerdisk", // relative to the base directory
		"oci:oci/containerdisk:latest",
		"oci-archive:oci/containerdisk.oci.tar",
		"oci-archive:" + a.ContainerDiskOCITar + ":latest",
		"docker-archive:oci/containerdisk.docker.tar",
		"docker-archive:oci/containerdisk.docker.tar:kemu.local/testguest/containerdisk:latest",
	} {
		p, err := s.DiskFile(ctx, ref, "", "")
		if err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		paths = append(paths, p)
	}
	for _, p := range paths[1:] {
		if p != paths[0] {
			t.Errorf("paths differ: %v", paths)
		}
	}
	if n := s.extractions.Load(); n != 1 {
		t.Errorf("%d extractions, want 1", n)
	}

	// Select by manifest digest.
	idx, err := layout.ImageIndexFromPath(a.ContainerDiskOCI)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	d := im.Manifests[0].Digest.String()
	for _, ref := range []string{"oci:" + a.ContainerDiskOCI + "@" + d, "oci-archive:" + a.ContainerDiskOCITar + "@" + d} {
		if p, err := s.DiskFile(ctx, ref, "", ""); err != nil || p != paths[0] {
			t.Errorf("%s: %s, %v", ref, p, err)
		}
	}
}

func TestKernelBootFiles(t *testing.T) {
	a := artifacts(t)
	s := newStore(t, "")
	ctx := ctxT(t)
	for _, ref := range []string{"oci:" + a.KernelBootOCI, "oci-archive:" + a.KernelBootOCITar, "docker-archive:" + a.KernelBootDockerTar} {
		k, err := s.File(ctx, ref, corev1.PullIfNotPresent, "/boot/vmlinuz")
		if err != nil {
			t.Fatal(err)
		}
		checkCached(t, s, k, sha256File(t, a.Kernel))
		i, err := s.File(ctx, ref, corev1.PullIfNotPresent, "/boot/initrd.img")
		if err != nil {
			t.Fatal(err)
		}
		checkCached(t, s, i, sha256File(t, a.Initrd))
	}
	if n := s.extractions.Load(); n != 2 {
		t.Errorf("%d extractions, want 2", n)
	}
	_, err := s.DiskFile(ctx, "oci:"+a.KernelBootOCI, "", "")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "/disk/") {
		t.Errorf("DiskFile of an image without /disk: %v", err)
	}
}

func TestConcurrentCallers(t *testing.T) {
	a := artifacts(t)
	want := sha256File(t, a.Disk)
	for _, ref := range []string{"oci:" + a.ContainerDiskOCI, "oci-archive:" + a.ContainerDiskOCITar} {
		s := newStore(t, "")
		ctx := ctxT(t)
		var wg sync.WaitGroup
		paths := make([]string, 10)
		errs := make([]error, 10)
		for i := range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				path := ""
				if i%2 == 1 {
					path = "/disk/disk.qcow2"
				}
				paths[i], errs[i] = s.DiskFile(ctx, ref, corev1.PullIfNotPresent, path)
			}()
		}
		wg.Wait()
		for i := range 10 {
			if errs[i] != nil {
				t.Fatalf("caller %d: %v", i, errs[i])
			}
			if paths[i] != paths[0] {
				t.Errorf("caller %d: %s, caller 0: %s", i, paths[i], paths[0])
			}
		}
		checkCached(t, s, paths[0], want)
		// The default-disk scan and an explicit path may both extract once.
		if n := s.extractions.Load(); n < 1 || n > 2 {
			t.Errorf("%d extractions for 10 concurrent callers", n)
		}
		leftovers, _ := filepath.Glob(filepath.Join(s.Dir(), "images", "*", "rootfs", "disk", ".extract-*"))
		more, _ := filepath.Glob(filepath.Join(s.Dir(), "images", "*", ".extract-*"))
		if len(leftovers)+len(more) > 0 {
			t.Errorf("temporary files left: %v %v", leftovers, more)
		}
	}
}

// ------------------------------------------------------- synthetic images --

type tfile struct {
	name string
	typ  byte // tar.TypeReg (default), TypeSymlink, TypeDir, TypeLink
	data string
	link string
}

func buildImage(t testing.TB, files ...tfile) v1.Image {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Typeflag: f.typ, Mode: 0o644, Linkname: f.link, ModTime: time.Unix(946684800, 0)}
		switch f.typ {
		case 0:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		case tar.TypeDir:
			h.Mode = 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(f.data)); err != nil {
				t.Fatal(err)
			}
		}
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
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: l})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// writeLayout writes images (tag → image) into a new layout directory.
func writeLayout(t testing.TB, imgs map[string]v1.Image) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	for tag, img := range imgs {
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{annotationRefName: tag})); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func TestErrors(t *testing.T) {
	s := newStore(t, "")
	ctx := ctxT(t)
	two := writeLayout(t, map[string]v1.Image{"latest": buildImage(t,
		tfile{name: "disk/", typ: tar.TypeDir},
		tfile{name: "disk/a.img", data: "a"},
		tfile{name: "disk/b.qcow2", data: "b"},
	)})
	empty := writeLayout(t, map[string]v1.Image{"latest": buildImage(t, tfile{name: "etc/hostname", data: "x"})})
	dirOnly := writeLayout(t, map[string]v1.Image{"latest": buildImage(t, tfile{name: "disk/sub/x.img", data: "x"})})
	multi := writeLayout(t, map[string]v1.Image{
		"v1": buildImage(t, tfile{name: "disk/x.img", data: "1"}),
		"v2": buildImage(t, tfile{name: "disk/x.img", data: "2"}),
	})

	for _, tc := range []struct {
		ref, path string
		file      bool
		is        error
		want      string
	}{
		{ref: "oci:/nonexistent/layout", want: "/nonexistent/layout: no such file"},
		{ref: "oci-archive:/nonexistent/x.tar", want: "no such file"},
		{ref: "docker-archive:/nonexistent/x.tar", want: "no such file"},
		{ref: "oci:" + empty + "-nope:v1", want: "no such file"},
		{ref: "oci:" + empty + ":v9", want: `0 images tagged "v9" (tags: latest)`},
		{ref: "oci:" + empty + "@sha256:" + strings.Repeat("0", 64), want: "no manifest sha256:000"},
		{ref: "oci:" + empty + "@sha256:123", want: "invalid digest"},
		{ref: "oci:" + multi, want: "no single one tagged latest: select one with :TAG or @sha256:... (tags: v1, v2)"},
		{ref: "oci:" + two, want: "2 entries under /disk/ (/disk/a.img, /disk/b.qcow2), only one disk is allowed"},
		{ref: "oci:" + empty, is: ErrNotFound, want: "no disk image under /disk/"},
		{ref: "oci:" + dirOnly, want: "/disk/sub is a directory"},
		{ref: "oci:" + empty, path: "/disk/missing.qcow2", is: ErrNotFound, want: "no such file in the image: /disk/missing.qcow2"},
		{ref: "oci:" + empty, path: "/etc", file: true, want: "/etc is a directory"},
		{ref: "oci:" + empty, path: "/", file: true, want: "root directory"},
		{ref: "oci:" + empty, path: "", file: true, want: "no path given"},
		{ref: "Not A Reference!", want: "invalid image reference"},
		{ref: "oci:", want: "no path"},
		{ref: "", want: "empty image reference"},
		{ref: "docker-archive:/x.tar@sha256:" + strings.Repeat("0", 64), want: "not by digest"},
		{ref: "oci:" + filepath.Join(empty, "index.json"), want: "not an OCI layout directory"},
		{ref: "oci-archive:" + empty, want: "is a directory"},
		{ref: "127.0.0.1:1/x:v1", path: "/x", want: ErrNotPresent.Error()},
	} {
		var err error
		if tc.file {
			_, err = s.File(ctx, tc.ref, corev1.PullIfNotPresent, tc.path)
		} else {
			policy := corev1.PullIfNotPresent
			if strings.HasPrefix(tc.ref, "127.") {
				policy = corev1.PullNever
			}
			_, err = s.DiskFile(ctx, tc.ref, policy, tc.path)
		}
		if err == nil {
			t.Errorf("%s %q: no error", tc.ref, tc.path)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || (tc.is != nil && !errors.Is(err, tc.is)) {
			t.Errorf("%s %q:\n  got  %v\n  want %q", tc.ref, tc.path, err, tc.want)
		}
		if tc.ref != "" && !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.ref)) {
			t.Errorf("%s: error does not name the image: %v", tc.ref, err)
		}
	}

	// The tags of a multi-image layout select.
	for tag, data := range map[string]string{"v1": "1", "v2": "2"} {
		p, err := s.DiskFile(ctx, "oci:"+multi+":"+tag, "", "")
		if err != nil {
			t.Fatal(err)
		}
		checkCached(t, s, p, sha(data))
	}
}

func TestLinksAndWhiteouts(t *testing.T) {
	s := newStore(t, "")
	ctx := ctxT(t)
	base := buildImage(t,
		tfile{name: "data/real.img", data: "real disk"},
		tfile{name: "data/old.img", data: "old"},
		tfile{name: "disk/", typ: tar.TypeDir},
		tfile{name: "disk/disk.img", typ: tar.TypeSymlink, link: "../data/real.img"},
		tfile{name: "abs", typ: tar.TypeSymlink, link: "/data/real.img"},
		tfile{name: "hard", typ: tar.TypeLink, link: "data/real.img"},
		tfile{name: "loop", typ: tar.TypeSymlink, link: "loop"},
		tfile{name: "dangling", typ: tar.TypeSymlink, link: "/nowhere"},
	)
	// A second layer replaces a file and deletes another.
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []tfile{{name: "data/new.img", data: "new"}, {name: "data/.wh.old.img"}} {
		_ = tw.WriteHeader(&tar.Header{Name: f.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(f.data))})
		_, _ = tw.Write([]byte(f.data))
	}
	_ = tw.Close()
	b := buf.Bytes()
	l2, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(base, l2)
	if err != nil {
		t.Fatal(err)
	}
	ref := "oci:" + writeLayout(t, map[string]v1.Image{"latest": img})

	p, err := s.DiskFile(ctx, ref, "", "")
	if err != nil {
		t.Fatal(err)
	}
	checkCached(t, s, p, sha("real disk"))
	for _, path := range []string{"/abs", "/hard", "/data/new.img"} {
		p, err := s.File(ctx, ref, "", path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		want := "real disk"
		if path == "/data/new.img" {
			want = "new"
		}
		checkCached(t, s, p, sha(want))
	}
	for path, want := range map[string]string{
		"/data/old.img": "no such file in the image: /data/old.img",
		"/loop":         "too many levels of links",
		"/dangling":     "/nowhere (link target of /dangling)",
	} {
		if _, err := s.File(ctx, ref, "", path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", path, err, want)
		}
	}
}

func TestCorruptLayer(t *testing.T) {
	other := buildImage(t, tfile{name: "disk/disk.img", data: "evil"})
	ols, _ := other.Layers()
	orc, _ := ols[0].Compressed()
	otherBlob, _ := io.ReadAll(orc)
	for _, tc := range []struct {
		name, path, want string
		corrupt          func([]byte) []byte
	}{
		{"gzip trailer", "", "gzip: invalid checksum", func(b []byte) []byte { b[len(b)-5] ^= 0xff; return b }},
		{"gzip trailer, path", "/disk/disk.img", "gzip: invalid checksum", func(b []byte) []byte { b[len(b)-5] ^= 0xff; return b }},
		{"other valid blob", "", "(corrupt)", func([]byte) []byte { return otherBlob }},
		{"other valid blob, path", "/disk/disk.img", "(corrupt)", func([]byte) []byte { return otherBlob }},
		{"truncated", "/disk/disk.img", "(corrupt)", func(b []byte) []byte { return b[:len(b)/2] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := buildImage(t, tfile{name: "disk/disk.img", data: strings.Repeat("disk", 1000)})
			dir := writeLayout(t, map[string]v1.Image{"latest": img})
			ls, _ := img.Layers()
			d, _ := ls[0].Digest()
			blob := filepath.Join(dir, "blobs", d.Algorithm, d.Hex)
			b, err := os.ReadFile(blob)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(blob, tc.corrupt(b), 0o644); err != nil {
				t.Fatal(err)
			}
			s := newStore(t, "")
			_, err = s.DiskFile(ctx(t), "oci:"+dir, "", tc.path)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("corrupt layer: %v, want %q", err, tc.want)
			}
			if files, _ := filepath.Glob(filepath.Join(s.Dir(), "images", "*", "rootfs", "disk", "*")); len(files) > 0 {
				t.Errorf("files left after a failed extraction: %v", files)
			}
		})
	}
}

func ctx(t testing.TB) context.Context { return ctxT(t) }

// ------------------------------------------------------------- registry --

type countingHandler struct {
	h        http.Handler
	requests atomic.Int64
}

func (c *countingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.requests.Add(1)
	c.h.ServeHTTP(w, r)
}

func TestRegistry(t *testing.T) {
	a := artifacts(t)
	reg := &countingHandler{h: registry.New(registry.Logger(log.New(io.Discard, "", 0)))}
	srv := httptest.NewServer(reg)
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	ctx := ctxT(t)

	push := func(repoTag string, img v1.Image) v1.Hash {
		t.Helper()
		ref, err := name.ParseReference(host + "/" + repoTag)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	layoutImg := func(dir string) v1.Image {
		t.Helper()
		img, err := layoutImage(dirLayout(dir), "")
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	push("testguest/containerdisk:v1", layoutImg(a.ContainerDiskOCI))
	kbDigest := push("testguest/kernelboot:v1", layoutImg(a.KernelBootOCI))
	diskSHA := sha256File(t, a.Disk)

	s := newStore(t, "")
	cd := host + "/testguest/containerdisk:v1"

	// Never, not cached.
	_, err := s.DiskFile(ctx, cd, corev1.PullNever, "")
	if !errors.Is(err, ErrNotPresent) {
		t.Fatalf("Never before any pull: %v", err)
	}
	if !strings.Contains(err.Error(), cd) {
		t.Errorf("error does not name the image: %v", err)
	}

	// IfNotPresent pulls once.
	p, err := s.DiskFile(ctx, cd, corev1.PullIfNotPresent, "")
	if err != nil {
		t.Fatal(err)
	}
	checkCached(t, s, p, diskSHA)
	if n := s.pulls.Load(); n != 1 {
		t.Errorf("%d pulls, want 1", n)
	}

	// Now cached: Never and IfNotPresent make no request.
	before := reg.requests.Load()
	for _, pol := range []corev1.PullPolicy{corev1.PullNever, corev1.PullIfNotPresent} {
		p2, err := s.DiskFile(ctx, cd, pol, "/disk/disk.qcow2")
		if err != nil || p2 != p {
			t.Errorf("%s: %s, %v", pol, p2, err)
		}
	}
	if n := reg.requests.Load() - before; n != 0 {
		t.Errorf("%d registry requests for a cached image", n)
	}

	// A new image under the same tag: IfNotPresent keeps the cached one,
	// Always gets the new one.
	v2 := buildImage(t, tfile{name: "disk/disk.qcow2", data: "version 2"})
	push("testguest/containerdisk:v1", v2)
	if p2, err := s.DiskFile(ctx, cd, corev1.PullIfNotPresent, ""); err != nil || p2 != p {
		t.Errorf("IfNotPresent after a re-push: %s, %v", p2, err)
	}
	p3, err := s.DiskFile(ctx, cd, corev1.PullAlways, "")
	if err != nil {
		t.Fatal(err)
	}
	checkCached(t, s, p3, sha("version 2"))
	if p, err := s.DiskFile(ctx, cd, corev1.PullNever, ""); err != nil || p != p3 {
		t.Errorf("Never after Always: %s, %v (want %s)", p, err, p3)
	}
	// Always again: only the manifest is fetched (layers are cached).
	before = reg.requests.Load()
	if _, err := s.DiskFile(ctx, cd, corev1.PullAlways, ""); err != nil {
		t.Fatal(err)
	}
	if n := reg.requests.Load() - before; n > 3 {
		t.Errorf("%d requests for Always with everything cached", n)
	}

	// Pulled by digest; a second path with Never comes from the cached blobs.
	kb := fmt.Sprintf("%s/testguest/kernelboot@%s", host, kbDigest)
	k, err := s.File(ctx, kb, "", "/boot/vmlinuz") // default for a digest: IfNotPresent
	if err != nil {
		t.Fatal(err)
	}
	checkCached(t, s, k, sha256File(t, a.Kernel))
	i, err := s.File(ctx, kb, corev1.PullNever, "/boot/initrd.img")
	if err != nil {
		t.Fatal(err)
	}
	checkCached(t, s, i, sha256File(t, a.Initrd))

	// Errors: unknown repository, unknown policy, registry down.
	if _, err := s.DiskFile(ctx, host+"/nope/nope:v1", corev1.PullIfNotPresent, ""); err == nil ||
		!strings.Contains(err.Error(), "MANIFEST_UNKNOWN") && !strings.Contains(err.Error(), "NAME_UNKNOWN") {
		t.Errorf("missing image: %v", err)
	}
	if _, err := s.DiskFile(ctx, cd, "Sometimes", ""); err == nil || !strings.Contains(err.Error(), `unknown imagePullPolicy "Sometimes"`) {
		t.Errorf("bad policy: %v", err)
	}
	srv.Close()
	if _, err := s.DiskFile(ctx, cd, corev1.PullAlways, ""); err == nil {
		t.Error("Always with the registry down: no error")
	}
	if p, err := s.DiskFile(ctx, cd, corev1.PullIfNotPresent, ""); err != nil || p != p3 {
		t.Errorf("IfNotPresent with the registry down: %s, %v", p, err)
	}
}

func TestConcurrentPulls(t *testing.T) {
	a := artifacts(t)
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(reg)
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	ctx := ctxT(t)
	img, err := layoutImage(dirLayout(a.ContainerDiskOCI), "")
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := name.ParseReference(host + "/cd:v1")
	if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, "")
	var wg sync.WaitGroup
	errs := make([]error, 10)
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.DiskFile(ctx, ref.String(), corev1.PullIfNotPresent, "")
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("caller %d: %v", i, err)
		}
	}
	if n := s.pulls.Load(); n != 1 {
		t.Errorf("%d pulls for 10 concurrent IfNotPresent callers", n)
	}
}

func TestParseRef(t *testing.T) {
	dir := t.TempDir()
	colon := filepath.Join(dir, "a:b")
	if err := os.Mkdir(colon, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ in, path, sel string }{
		{"oci:" + dir, dir, ""},
		{"oci:" + dir + ":v1", dir, "v1"},
		{"oci:" + dir + "@sha256:abc", dir, "@sha256:abc"},
		{"oci:" + colon, colon, ""},
		{"oci:" + colon + ":v2", colon, "v2"},
		{"oci:rel/dir:tag", filepath.Join(dir, "rel/dir"), "tag"},
		{"oci:rel/dir", filepath.Join(dir, "rel/dir"), ""},
		{"docker-archive:" + dir + ":example.com:5000/x/y:v1", dir, "example.com:5000/x/y:v1"},
	} {
		r, err := parseRef(tc.in, dir)
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if r.path != tc.path || r.selector != tc.sel {
			t.Errorf("%s: path %q selector %q, want %q %q", tc.in, r.path, r.selector, tc.path, tc.sel)
		}
	}
	r, err := parseRef("quay.io/containerdisks/fedora:41", dir)
	if err != nil || r.kind != kindRegistry || r.ref.Name() != "quay.io/containerdisks/fedora:41" {
		t.Errorf("registry ref: %+v %v", r, err)
	}
}
