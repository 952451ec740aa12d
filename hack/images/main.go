// Command images builds container images offline, as OCI archives that
// `ctr images import` loads (no registry, no Docker engine). Two sets:
//
// -set test (the default; test/cluster runs it when it starts a node):
//
//	OUT/pause.oci.tar    kemu.local/test/pause:1    the sandbox image: hack/images/pause, static
//	OUT/busybox.oci.tar  kemu.local/test/busybox:1  Debian's busybox-static as /bin/busybox, /bin/sh, /bin/sleep, ...
//
// -set kemu (make images; see kemu.go and docs/deploy.md):
//
//	OUT/kemu-launcher.oci.tar    kemu.local/kemu-launcher:VERSION (and :latest)    kemu-launcher, kemu-copy, kemuctl, QEMU
//	OUT/kemu-controller.oci.tar  kemu.local/kemu-controller:VERSION (and :latest)  kemu-controller
//	OUT/kemu-api.oci.tar         kemu.local/kemu-api:VERSION (and :latest)         kemu-api
//	OUT/kemu-nodeagent.oci.tar   kemu.local/kemu-nodeagent:VERSION (and :latest)   kemu-nodeagent, QEMU, the KVM probe guest
//
// -set all builds both.
//
// Each archive is an OCI image layout (oci-layout, index.json, blobs/) in one
// tar; index.json names the image with the annotations containerd reads
// (io.containerd.image.name) and the OCI ref name, once per name. Like
// hack/testguest/ocilayout (which writes the test guest's layouts), every
// file carries a fixed timestamp and layers are written in a fixed order, so
// digests are reproducible for identical inputs:
//
//	go run ./hack/images -out DIR [-set test|kemu|all] [-version V]
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kemu-dev/kemu/hack/images/gobuild"
)

// Image references; test/cluster uses the same strings.
const (
	PauseRef   = "kemu.local/test/pause:1"
	BusyboxRef = "kemu.local/test/busybox:1"
)

type file struct {
	src, dest string // host path; path in the image without leading slash
	mode      int64
}

// layerSpec is the content of one layer: directories (created with their
// parents, 0755 unless dirModes says otherwise), files and symlinks.
type layerSpec struct {
	name     string // for the image history
	files    []file
	symlinks map[string]string // path in the image -> target
	dirs     []string          // extra (empty) directories
	dirModes map[string]int64  // path -> mode (e.g. tmp: 01777)
}

type imageSpec struct {
	name       string   // archive name: OUT/<name>.oci.tar
	refs       []string // every name the archive gives the image
	layers     []*layerSpec
	entrypoint []string
	env        []string          // default PATH=/bin
	labels     map[string]string // image config labels
	user       string
}

func main() {
	out := flag.String("out", "", "output directory")
	set := flag.String("set", "test", "images to build: test (pause, busybox), kemu (launcher, controller, api, nodeagent) or all")
	busybox := flag.String("busybox", "/bin/busybox", "a static busybox (Debian: busybox-static)")
	epoch := flag.Int64("epoch", 946684800, "timestamp (seconds since the epoch) for every file and config")
	version := flag.String("version", "dev", "kemu images: the tag and the binaries' version (-X main.version)")
	testguest := flag.String("testguest", "", "kemu images: the test guest's artifacts (vmlinuz, initrd.img: the KVM probe guest); default <repo>/_out/testguest")
	flag.Parse()
	if *out == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	ts := time.Unix(*epoch, 0).UTC()
	var err error
	switch *set {
	case "test":
		err = run(*out, *busybox, ts)
	case "kemu":
		err = runKemu(*out, *version, *testguest, ts)
	case "all":
		if err = run(*out, *busybox, ts); err == nil {
			err = runKemu(*out, *version, *testguest, ts)
		}
	default:
		err = fmt.Errorf("-set %q: want test, kemu or all", *set)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "images: %v\n", err)
		os.Exit(1)
	}
}

func run(out, busybox string, ts time.Time) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	if err := staticELF(busybox); err != nil {
		return fmt.Errorf("busybox: %w (install busybox-static: bash hack/install-deps.sh)", err)
	}
	tmp, err := os.MkdirTemp(out, ".build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	pause := filepath.Join(tmp, "pause")
	// The package next to this file, built statically for the image.
	if err := gobuild.Build(pause, "github.com/kemu-dev/kemu/hack/images/pause", ""); err != nil {
		return err
	}
	specs := []imageSpec{
		{name: "pause", refs: []string{PauseRef}, layers: []*layerSpec{{name: "pause", files: []file{{pause, "pause", 0o755}}}}, entrypoint: []string{"/pause"}},
		{
			name: "busybox", refs: []string{BusyboxRef},
			layers: []*layerSpec{{
				name:     "busybox",
				files:    []file{{busybox, "bin/busybox", 0o755}},
				symlinks: busyboxLinks("sh", "cat", "echo", "env", "ls", "mkdir", "rm", "sleep", "test", "touch", "true"),
			}},
			entrypoint: []string{"/bin/sh"},
		},
	}
	w := newWriter(ts)
	for _, s := range specs {
		d, err := w.writeArchive(filepath.Join(out, s.name+".oci.tar"), s)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		fmt.Printf("%s %s %s\n", s.name, s.refs[0], d)
	}
	return nil
}

// busyboxLinks links /bin/<applet> to busybox, so commands work without a
// shell (inside busybox sh every applet works anyway).
func busyboxLinks(applets ...string) map[string]string {
	m := map[string]string{}
	for _, a := range applets {
		m["bin/"+a] = "busybox"
	}
	return m
}

// staticELF checks that path is an ELF file without an interpreter, i.e. it
// runs in an image without a libc.
func staticELF(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if len(b) < 4 || string(b[:4]) != "\x7fELF" {
		return fmt.Errorf("%s is not an ELF binary", path)
	}
	if bytes.Contains(b[:min(len(b), 4096)], []byte("/lib64/ld-linux")) {
		return fmt.Errorf("%s is dynamically linked", path)
	}
	return nil
}

// writer builds layers once (a layer shared by several images is
// compressed once and has the same digest in each).
type writer struct {
	ts     time.Time
	layers map[*layerSpec]v1.Layer
}

func newWriter(ts time.Time) *writer { return &writer{ts: ts, layers: map[*layerSpec]v1.Layer{}} }

func (w *writer) layer(l *layerSpec) (v1.Layer, error) {
	if got, ok := w.layers[l]; ok {
		return got, nil
	}
	lt, err := layerTar(l, w.ts)
	if err != nil {
		return nil, err
	}
	// Compressed once here (gzip output is deterministic for the same
	// input and level); the library takes it as an already compressed layer.
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(lt); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	b := gz.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	w.layers[l] = layer
	return layer, nil
}

func (w *writer) image(s imageSpec) (v1.Image, error) {
	ts := w.ts
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	env := s.env
	if env == nil {
		env = []string{"PATH=/bin"}
	}
	img, err := mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: "amd64",
		OS:           "linux",
		Created:      v1.Time{Time: ts},
		Config: v1.Config{
			Entrypoint: s.entrypoint,
			Env:        env,
			Labels:     s.labels,
			User:       s.user,
		},
	})
	if err != nil {
		return nil, err
	}
	for _, ls := range s.layers {
		layer, err := w.layer(ls)
		if err != nil {
			return nil, fmt.Errorf("layer %s: %w", ls.name, err)
		}
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:   layer,
			History: v1.History{Created: v1.Time{Time: ts}, CreatedBy: "hack/images", Comment: "kemu image " + s.name + ": " + ls.name},
		})
		if err != nil {
			return nil, err
		}
	}
	return mutate.CreatedAt(img, v1.Time{Time: ts})
}

// writeArchive writes s as an OCI layout in one tar and returns the image's
// manifest digest.
func (w *writer) writeArchive(dest string, s imageSpec) (v1.Hash, error) {
	ts := w.ts
	img, err := w.image(s)
	if err != nil {
		return v1.Hash{}, err
	}
	manifest, err := img.RawManifest()
	if err != nil {
		return v1.Hash{}, err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return v1.Hash{}, err
	}
	layers, err := img.Layers()
	if err != nil {
		return v1.Hash{}, err
	}
	digest, err := img.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	blobs := map[string]func() (io.ReadCloser, int64, error){}
	add := func(b []byte) {
		h, _, _ := v1.SHA256(bytes.NewReader(b))
		blobs["blobs/sha256/"+h.Hex] = func() (io.ReadCloser, int64, error) {
			return io.NopCloser(bytes.NewReader(b)), int64(len(b)), nil
		}
	}
	add(manifest)
	add(config)
	for _, l := range layers {
		h, err := l.Digest()
		if err != nil {
			return v1.Hash{}, err
		}
		size, err := l.Size()
		if err != nil {
			return v1.Hash{}, err
		}
		blobs["blobs/sha256/"+h.Hex] = func() (io.ReadCloser, int64, error) {
			rc, err := l.Compressed()
			return rc, size, err
		}
	}
	var descs []v1.Descriptor
	for _, ref := range s.refs {
		descs = append(descs, v1.Descriptor{
			MediaType: types.OCIManifestSchema1,
			Size:      int64(len(manifest)),
			Digest:    digest,
			Platform:  &v1.Platform{OS: "linux", Architecture: "amd64"},
			Annotations: map[string]string{
				"io.containerd.image.name":          ref,
				"org.opencontainers.image.ref.name": ref,
			},
		})
	}
	index, err := json.Marshal(v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests:     descs,
	})
	if err != nil {
		return v1.Hash{}, err
	}
	add2 := func(name string, b []byte) {
		blobs[name] = func() (io.ReadCloser, int64, error) { return io.NopCloser(bytes.NewReader(b)), int64(len(b)), nil }
	}
	add2("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	add2("index.json", index)

	tmp := dest + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return v1.Hash{}, err
	}
	defer os.Remove(tmp)
	tw := tar.NewWriter(f)
	err = func() error {
		for _, d := range []string{"blobs/", "blobs/sha256/"} {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: ts, Format: tar.FormatPAX}); err != nil {
				return err
			}
		}
		names := make([]string, 0, len(blobs))
		for n := range blobs {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			rc, size, err := blobs[n]()
			if err != nil {
				return err
			}
			err = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o644, Size: size, ModTime: ts, Format: tar.FormatPAX})
			if err == nil {
				_, err = io.Copy(tw, rc)
			}
			rc.Close()
			if err != nil {
				return err
			}
		}
		return tw.Close()
	}()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return v1.Hash{}, err
	}
	return digest, os.Rename(tmp, dest)
}

// layerTar returns one layer: parent directories, files and symlinks,
// owned by root, in a fixed order.
func layerTar(s *layerSpec, ts time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	paths := []string{}
	for _, f := range s.files {
		paths = append(paths, f.dest)
	}
	for p := range s.symlinks {
		paths = append(paths, p)
	}
	for _, d := range s.dirs {
		dirs[d] = true
	}
	for _, p := range append(paths, s.dirs...) {
		for d := path.Dir(p); d != "." && d != "/"; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	// A path that is also a symlink (e.g. lib -> usr/lib) is not a directory.
	for p := range s.symlinks {
		delete(dirs, p)
	}
	dirList := make([]string, 0, len(dirs))
	for d := range dirs {
		dirList = append(dirList, d)
	}
	sort.Strings(dirList)
	hdr := func(h *tar.Header) error {
		h.ModTime, h.Format = ts, tar.FormatPAX
		return tw.WriteHeader(h)
	}
	for _, d := range dirList {
		mode := int64(0o755)
		if m, ok := s.dirModes[d]; ok {
			mode = m
		}
		if err := hdr(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: mode}); err != nil {
			return nil, err
		}
	}
	files := append([]file(nil), s.files...)
	sort.Slice(files, func(i, j int) bool { return files[i].dest < files[j].dest })
	for _, f := range files {
		data, err := os.ReadFile(f.src)
		if err != nil {
			return nil, err
		}
		if err := hdr(&tar.Header{Typeflag: tar.TypeReg, Name: f.dest, Mode: f.mode, Size: int64(len(data))}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	links := make([]string, 0, len(s.symlinks))
	for p := range s.symlinks {
		links = append(links, p)
	}
	sort.Strings(links)
	for _, p := range links {
		if err := hdr(&tar.Header{Typeflag: tar.TypeSymlink, Name: p, Linkname: s.symlinks[p], Mode: 0o777}); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
