package images

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// An OCI image layout (https://github.com/opencontainers/image-spec/blob/main/image-layout.md)
// read from a directory or from a tar of one, without unpacking the tar.

const (
	annotationRefName = "org.opencontainers.image.ref.name"
	maxSmallBlob      = 16 << 20 // manifests, indexes and configs
	maxIndexDepth     = 4
)

// layoutFS opens files of a layout by slash-separated relative name
// ("index.json", "blobs/sha256/<hex>").
type layoutFS interface {
	open(name string) (io.ReadCloser, int64, error)
	String() string
}

// dirLayout is a layout directory.
type dirLayout string

func (d dirLayout) String() string { return string(d) }

func (d dirLayout) open(name string) (io.ReadCloser, int64, error) {
	f, err := os.Open(filepath.Join(string(d), filepath.FromSlash(name)))
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, 0, fmt.Errorf("%s: not a regular file", f.Name())
	}
	return f, st.Size(), nil
}

// tarLayout is a tar of a layout directory, indexed once: blobs are read
// in place through section readers.
type tarLayout struct {
	path    string
	entries map[string]tarEntry
}

type tarEntry struct{ off, size int64 }

func (t *tarLayout) String() string { return t.path }

func openTarLayout(p string) (*tarLayout, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t := &tarLayout{path: p, entries: map[string]tarEntry{}}
	tr := tar.NewReader(f) // skips file data with Seek: only headers are read
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: reading tar: %w", p, err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		// archive/tar reads headers straight from f, so f's offset is now
		// the start of the entry's data.
		off, err := f.Seek(0, io.SeekCurrent)
		if err != nil {
			return nil, err
		}
		name := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
		t.entries[name] = tarEntry{off: off, size: h.Size}
	}
	if _, ok := t.entries["index.json"]; !ok {
		return nil, fmt.Errorf("%s: not an OCI archive (no index.json)", p)
	}
	return t, nil
}

func (t *tarLayout) open(name string) (io.ReadCloser, int64, error) {
	e, ok := t.entries[name]
	if !ok {
		return nil, 0, &fs.PathError{Op: "open", Path: t.path + ":" + name, Err: fs.ErrNotExist}
	}
	f, err := os.Open(t.path)
	if err != nil {
		return nil, 0, err
	}
	return &sectionFile{SectionReader: io.NewSectionReader(f, e.off, e.size), f: f}, e.size, nil
}

type sectionFile struct {
	*io.SectionReader
	f *os.File
}

func (s *sectionFile) Close() error { return s.f.Close() }

func blobName(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }

// readSmall reads a whole small file of the layout.
func readSmall(l layoutFS, name string) ([]byte, error) {
	rc, size, err := l.open(name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if size > maxSmallBlob {
		return nil, fmt.Errorf("%s: %s is too large (%d bytes)", l, name, size)
	}
	return io.ReadAll(io.LimitReader(rc, maxSmallBlob))
}

// readBlob reads a small blob and checks its digest.
func readBlob(l layoutFS, h v1.Hash) ([]byte, error) {
	b, err := readSmall(l, blobName(h))
	if err != nil {
		return nil, err
	}
	if got := digestOf(b); got != h {
		return nil, fmt.Errorf("%s: blob %s has digest %s", l, h, got)
	}
	return b, nil
}

func digestOf(b []byte) v1.Hash {
	sum := sha256.Sum256(b)
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
}

// layoutImage picks an image in a layout: selector "" (the only manifest,
// else the one tagged latest), a tag (annotation
// org.opencontainers.image.ref.name) or "@sha256:...". Indexes resolve to
// the linux/GOARCH manifest.
func layoutImage(l layoutFS, selector string) (v1.Image, error) {
	b, err := readSmall(l, "index.json")
	if err != nil {
		return nil, err
	}
	idx, err := v1.ParseIndexManifest(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: index.json: %w", l, err)
	}
	var desc v1.Descriptor
	switch {
	case strings.HasPrefix(selector, "@"):
		h, err := v1.NewHash(selector[1:])
		if err != nil {
			return nil, fmt.Errorf("invalid digest %q: %w", selector[1:], err)
		}
		d, ok, err := findDigest(l, idx, h, 0)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("%s: no manifest %s", l, h)
		}
		desc = d
	case selector != "":
		var found []v1.Descriptor
		for _, d := range idx.Manifests {
			if d.Annotations[annotationRefName] == selector {
				found = append(found, d)
			}
		}
		if len(found) != 1 {
			return nil, fmt.Errorf("%s: %d images tagged %q (tags: %s)", l, len(found), selector, tags(idx))
		}
		desc = found[0]
	case len(idx.Manifests) == 1:
		desc = idx.Manifests[0]
	default:
		var latest []v1.Descriptor
		for _, d := range idx.Manifests {
			if d.Annotations[annotationRefName] == "latest" {
				latest = append(latest, d)
			}
		}
		if len(latest) != 1 {
			return nil, fmt.Errorf("%s: %d manifests and no single one tagged latest: select one with :TAG or @sha256:... (tags: %s)",
				l, len(idx.Manifests), tags(idx))
		}
		desc = latest[0]
	}
	return imageFromDescriptor(l, desc, 0)
}

func tags(idx *v1.IndexManifest) string {
	var t []string
	for _, d := range idx.Manifests {
		if n := d.Annotations[annotationRefName]; n != "" {
			t = append(t, n)
		}
	}
	if len(t) == 0 {
		return "none"
	}
	sort.Strings(t)
	return strings.Join(t, ", ")
}

func isIndex(mt types.MediaType) bool {
	return mt == types.OCIImageIndex || mt == types.DockerManifestList
}

// findDigest looks for a manifest with digest h in idx and its child indexes.
func findDigest(l layoutFS, idx *v1.IndexManifest, h v1.Hash, depth int) (v1.Descriptor, bool, error) {
	for _, d := range idx.Manifests {
		if d.Digest == h {
			return d, true, nil
		}
	}
	if depth >= maxIndexDepth {
		return v1.Descriptor{}, false, nil
	}
	for _, d := range idx.Manifests {
		if !isIndex(d.MediaType) {
			continue
		}
		child, err := readIndex(l, d.Digest)
		if err != nil {
			return v1.Descriptor{}, false, err
		}
		if cd, ok, err := findDigest(l, child, h, depth+1); err != nil || ok {
			return cd, ok, err
		}
	}
	return v1.Descriptor{}, false, nil
}

func readIndex(l layoutFS, h v1.Hash) (*v1.IndexManifest, error) {
	b, err := readBlob(l, h)
	if err != nil {
		return nil, err
	}
	idx, err := v1.ParseIndexManifest(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: index %s: %w", l, h, err)
	}
	return idx, nil
}

// imageFromDescriptor loads the image desc points at, resolving indexes to
// the manifest for this platform.
func imageFromDescriptor(l layoutFS, desc v1.Descriptor, depth int) (v1.Image, error) {
	if isIndex(desc.MediaType) {
		if depth >= maxIndexDepth {
			return nil, fmt.Errorf("%s: indexes nested too deeply", l)
		}
		idx, err := readIndex(l, desc.Digest)
		if err != nil {
			return nil, err
		}
		for _, d := range idx.Manifests {
			if p := d.Platform; p != nil && p.OS == "linux" && p.Architecture == runtime.GOARCH {
				return imageFromDescriptor(l, d, depth+1)
			}
		}
		return nil, fmt.Errorf("%s: index %s has no manifest for linux/%s", l, desc.Digest, runtime.GOARCH)
	}
	raw, err := readBlob(l, desc.Digest)
	if err != nil {
		return nil, err
	}
	m, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%s: manifest %s: %w", l, desc.Digest, err)
	}
	mt := desc.MediaType
	if m.MediaType != "" {
		mt = m.MediaType
	}
	switch mt {
	case types.OCIManifestSchema1, types.DockerManifestSchema2:
	case "":
		mt = types.OCIManifestSchema1
	default:
		return nil, fmt.Errorf("%s: manifest %s has media type %s, not an image", l, desc.Digest, mt)
	}
	return partial.CompressedToImage(&layoutImageCore{l: l, raw: raw, manifest: m, mediaType: mt})
}

type layoutImageCore struct {
	l         layoutFS
	raw       []byte
	manifest  *v1.Manifest
	mediaType types.MediaType
}

func (c *layoutImageCore) RawManifest() ([]byte, error)        { return c.raw, nil }
func (c *layoutImageCore) MediaType() (types.MediaType, error) { return c.mediaType, nil }
func (c *layoutImageCore) RawConfigFile() ([]byte, error) {
	return readBlob(c.l, c.manifest.Config.Digest)
}

func (c *layoutImageCore) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if h == c.manifest.Config.Digest {
		return &layoutLayer{l: c.l, desc: c.manifest.Config}, nil
	}
	for _, d := range c.manifest.Layers {
		if d.Digest == h {
			return &layoutLayer{l: c.l, desc: d}, nil
		}
	}
	return nil, fmt.Errorf("%s: no layer %s in the manifest", c.l, h)
}

type layoutLayer struct {
	l    layoutFS
	desc v1.Descriptor
}

func (ll *layoutLayer) Digest() (v1.Hash, error)            { return ll.desc.Digest, nil }
func (ll *layoutLayer) Size() (int64, error)                { return ll.desc.Size, nil }
func (ll *layoutLayer) MediaType() (types.MediaType, error) { return ll.desc.MediaType, nil }

// Compressed returns the blob; reading it to the end checks its digest.
func (ll *layoutLayer) Compressed() (io.ReadCloser, error) {
	rc, _, err := ll.l.open(blobName(ll.desc.Digest))
	if err != nil {
		return nil, err
	}
	return newVerifier(rc, ll.desc.Digest, fmt.Sprintf("%s: blob", ll.l))
}

// verifier checks the digest of what was read once EOF is reached.
type verifier struct {
	rc   io.ReadCloser
	h    hash.Hash
	want v1.Hash
	what string
}

func newVerifier(rc io.ReadCloser, want v1.Hash, what string) (io.ReadCloser, error) {
	h, err := v1.Hasher(want.Algorithm)
	if err != nil {
		rc.Close()
		return nil, err
	}
	return &verifier{rc: rc, h: h, want: want, what: what}, nil
}

func (v *verifier) Read(p []byte) (int, error) {
	n, err := v.rc.Read(p)
	v.h.Write(p[:n])
	if errors.Is(err, io.EOF) {
		if got := hex.EncodeToString(v.h.Sum(nil)); got != v.want.Hex {
			return n, fmt.Errorf("%s %s: content has digest %s:%s (corrupt)", v.what, v.want, v.want.Algorithm, got)
		}
	}
	return n, err
}

func (v *verifier) Close() error { return v.rc.Close() }
