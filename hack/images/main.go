// Command images builds the container images of kemu's test node offline, as
// OCI archives that `ctr images import` loads (no registry, no Docker):
//
//	OUT/pause.oci.tar    kemu.local/test/pause:1    the sandbox image: hack/images/pause, static
//	OUT/busybox.oci.tar  kemu.local/test/busybox:1  Debian's busybox-static as /bin/busybox, /bin/sh, /bin/sleep, ...
//
// Each archive is an OCI image layout (oci-layout, index.json, blobs/) in one
// tar; index.json names the image with the annotations containerd reads
// (io.containerd.image.name) and the OCI ref name. Like
// hack/testguest/ocilayout (which writes the test guest's layouts), every file
// carries a fixed timestamp, so digests are reproducible for identical
// inputs. test/cluster runs it when it starts a node:
//
//	go run ./hack/images -out DIR
package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
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

type imageSpec struct {
	name       string // archive name: OUT/<name>.oci.tar
	ref        string
	files      []file
	symlinks   map[string]string // path in the image -> target
	entrypoint []string
}

func main() {
	out := flag.String("out", "", "output directory")
	busybox := flag.String("busybox", "/bin/busybox", "a static busybox (Debian: busybox-static)")
	epoch := flag.Int64("epoch", 946684800, "timestamp (seconds since the epoch) for every file and config")
	flag.Parse()
	if *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*out, *busybox, time.Unix(*epoch, 0).UTC()); err != nil {
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
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", pause, "github.com/kemu-dev/kemu/hack/images/pause")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if b, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build pause: %v\n%s", err, b)
	}
	specs := []imageSpec{
		{name: "pause", ref: PauseRef, files: []file{{pause, "pause", 0o755}}, entrypoint: []string{"/pause"}},
		{
			name: "busybox", ref: BusyboxRef,
			files:      []file{{busybox, "bin/busybox", 0o755}},
			symlinks:   busyboxLinks("sh", "cat", "echo", "env", "ls", "mkdir", "rm", "sleep", "test", "touch", "true"),
			entrypoint: []string{"/bin/sh"},
		},
	}
	for _, s := range specs {
		d, err := writeArchive(filepath.Join(out, s.name+".oci.tar"), s, ts)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		fmt.Printf("%s %s %s\n", s.name, s.ref, d)
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

func image(s imageSpec, ts time.Time) (v1.Image, error) {
	lt, err := layerTar(s, ts)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(lt)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: "amd64",
		OS:           "linux",
		Created:      v1.Time{Time: ts},
		Config: v1.Config{
			Entrypoint: s.entrypoint,
			Env:        []string{"PATH=/bin"},
		},
	})
	if err != nil {
		return nil, err
	}
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: ts}, CreatedBy: "hack/images", Comment: "kemu test node image " + s.name},
	})
	if err != nil {
		return nil, err
	}
	return mutate.CreatedAt(img, v1.Time{Time: ts})
}

// writeArchive writes s as an OCI layout in one tar and returns the image's
// manifest digest.
func writeArchive(dest string, s imageSpec, ts time.Time) (v1.Hash, error) {
	img, err := image(s, ts)
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
	blobs := map[string][]byte{}
	add := func(b []byte) {
		h, _, _ := v1.SHA256(bytes.NewReader(b))
		blobs["blobs/sha256/"+h.Hex] = b
	}
	add(manifest)
	add(config)
	for _, l := range layers {
		rc, err := l.Compressed()
		if err != nil {
			return v1.Hash{}, err
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return v1.Hash{}, err
		}
		add(b)
	}
	index, err := json.Marshal(v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType: types.OCIManifestSchema1,
			Size:      int64(len(manifest)),
			Digest:    digest,
			Platform:  &v1.Platform{OS: "linux", Architecture: "amd64"},
			Annotations: map[string]string{
				"io.containerd.image.name":          s.ref,
				"org.opencontainers.image.ref.name": s.ref,
			},
		}},
	})
	if err != nil {
		return v1.Hash{}, err
	}
	blobs["oci-layout"] = []byte(`{"imageLayoutVersion":"1.0.0"}`)
	blobs["index.json"] = index

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: ts, Format: tar.FormatPAX}); err != nil {
			return v1.Hash{}, err
		}
	}
	names := make([]string, 0, len(blobs))
	for n := range blobs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		b := blobs[n]
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o644, Size: int64(len(b)), ModTime: ts, Format: tar.FormatPAX}); err != nil {
			return v1.Hash{}, err
		}
		if _, err := tw.Write(b); err != nil {
			return v1.Hash{}, err
		}
	}
	if err := tw.Close(); err != nil {
		return v1.Hash{}, err
	}
	tmp := dest + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return v1.Hash{}, err
	}
	return digest, os.Rename(tmp, dest)
}

// layerTar returns the image's single layer: parent directories, files and
// symlinks, owned by root.
func layerTar(s imageSpec, ts time.Time) ([]byte, error) {
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
	for _, p := range paths {
		for d := path.Dir(p); d != "." && d != "/"; d = path.Dir(d) {
			dirs[d] = true
		}
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
		if err := hdr(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755}); err != nil {
			return nil, err
		}
	}
	for _, f := range s.files {
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
