// Package images resolves container image references to local files with a
// cache, so a containerDisk's disk or a kernelBoot container's kernel can be
// handed to QEMU.
//
// References (skopeo's transport spelling):
//
//	oci:PATH[:TAG|@sha256:HEX]         OCI image layout directory
//	oci-archive:PATH[:TAG|@sha256:HEX] tar of an OCI image layout (read in place)
//	docker-archive:PATH[:REPO:TAG]     `docker save` tarball
//	anything else                      registry reference (name.ParseReference)
//
// Relative PATHs resolve against the Store's base directory. Without a
// selector a layout's only image is used, else the one tagged "latest".
// Indexes resolve to linux/GOARCH.
//
// Pull policies apply to registry references only (local references are
// always present): Never uses only the cache, IfNotPresent pulls when the
// reference is not cached, Always asks the registry for the reference's
// current manifest every time (layers already cached are not downloaded
// again). An empty policy is Kubernetes' default for the reference.
//
// Cache layout (under the cache directory):
//
//	oci/                         OCI layout holding the blobs of pulled images
//	refs/<sha256(ref)>.json      what a registry reference last resolved to
//	images/<id>/rootfs/<path>    extracted files, read-only (0444)
//	images/<id>/disk-path        the default containerDisk file of the image
//	locks/                       flock files
//
// <id> is the image ID (the digest of the image config, which names the
// uncompressed digests of all layers): the same image gives the same files
// whatever transport or layer compression it came with. Layers are checked
// against their digests (compressed and uncompressed) while extracting, so an
// extracted file really belongs to the image with that ID.
package images

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	corev1 "k8s.io/api/core/v1"
)

var (
	// ErrNotFound is returned (wrapped) when the image has no such file.
	ErrNotFound = errors.New("no such file in the image")
	// ErrNotPresent is returned (wrapped) when a registry image is not cached
	// and the pull policy is Never.
	ErrNotPresent = errors.New("image is not present in the local cache and imagePullPolicy is Never")
)

// DiskDir is where a containerDisk's disk is looked for when no path is given.
const DiskDir = "disk"

// Store resolves image references to files in a cache directory. It is safe
// for concurrent use, also by several processes sharing the cache.
type Store struct {
	dir     string
	baseDir string

	// remoteOptions are added to every registry request (tests).
	remoteOptions []remote.Option

	extractions atomic.Int64 // files extracted from an image (tests)
	pulls       atomic.Int64 // images fetched from a registry (tests)
}

// NewStore opens (creating it if needed) the cache in cacheDir. Relative
// paths of local references resolve against baseDir ("" = the working
// directory).
func NewStore(cacheDir, baseDir string) (*Store, error) {
	if cacheDir == "" {
		return nil, errors.New("images: no cache directory")
	}
	dir, err := filepath.Abs(cacheDir)
	if err != nil {
		return nil, err
	}
	if baseDir == "" {
		if baseDir, err = os.Getwd(); err != nil {
			return nil, err
		}
	}
	if baseDir, err = filepath.Abs(baseDir); err != nil {
		return nil, err
	}
	s := &Store{dir: dir, baseDir: baseDir}
	for _, d := range []string{s.ociDir(), filepath.Join(s.ociDir(), "blobs", "sha256"),
		filepath.Join(dir, "refs"), filepath.Join(dir, "images"), filepath.Join(dir, "locks")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("images: cache: %w", err)
		}
	}
	if err := writeFileAtomic(filepath.Join(s.ociDir(), "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644, true); err != nil {
		return nil, fmt.Errorf("images: cache: %w", err)
	}
	return s, nil
}

// Dir is the cache directory.
func (s *Store) Dir() string { return s.dir }

func (s *Store) ociDir() string { return filepath.Join(s.dir, "oci") }

func (s *Store) imageDir(id string) string { return filepath.Join(s.dir, "images", id) }

func (s *Store) rootfsPath(id, rel string) string {
	return filepath.Join(s.imageDir(id), "rootfs", filepath.FromSlash(rel))
}

func (s *Store) lockPath(parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return filepath.Join(s.dir, "locks", hex.EncodeToString(sum[:16])+".lock")
}

// File extracts the file at path (absolute or not, inside the image) of the
// image's flattened filesystem into the cache, unless it is there already,
// and returns its path in the cache. A symlink (or hard link) at path is
// followed inside the image. The file is read-only (0444) and must never be
// written.
func (s *Store) File(ctx context.Context, ref string, policy corev1.PullPolicy, path string) (string, error) {
	rel, err := cleanImagePath(path)
	if err != nil {
		return "", fmt.Errorf("image %q: %w", ref, err)
	}
	img, id, err := s.image(ctx, ref, policy)
	if err != nil {
		return "", err
	}
	p, err := s.file(ctx, img, id, rel)
	if err != nil {
		return "", fmt.Errorf("image %q: %w", ref, err)
	}
	return p, nil
}

// DiskFile returns a containerDisk's disk: File(path) when path is set, else
// the single entry under /disk/ (an error if there is none or several, as
// in KubeVirt).
func (s *Store) DiskFile(ctx context.Context, ref string, policy corev1.PullPolicy, path string) (string, error) {
	if path != "" {
		return s.File(ctx, ref, policy, path)
	}
	img, id, err := s.image(ctx, ref, policy)
	if err != nil {
		return "", err
	}
	p, err := s.defaultDisk(ctx, img, id)
	if err != nil {
		return "", fmt.Errorf("image %q: %w", ref, err)
	}
	return p, nil
}

// cleanImagePath turns a path inside an image into a clean relative
// slash-separated one ("disk/disk.qcow2").
func cleanImagePath(p string) (string, error) {
	if p == "" {
		return "", errors.New("no path given")
	}
	rel := strings.TrimPrefix(path.Clean("/"+p), "/")
	if rel == "" {
		return "", fmt.Errorf("path %q is the root directory", p)
	}
	return rel, nil
}

func tarName(n string) string { return strings.TrimPrefix(path.Clean("/"+n), "/") }

// image resolves ref to an image and its ID.
func (s *Store) image(ctx context.Context, ref string, policy corev1.PullPolicy) (v1.Image, string, error) {
	img, err := s.resolve(ctx, ref, policy)
	if err != nil {
		return nil, "", fmt.Errorf("image %q: %w", ref, err)
	}
	cfg, err := img.ConfigName()
	if err != nil {
		return nil, "", fmt.Errorf("image %q: config: %w", ref, err)
	}
	return verifiedImage{img}, cfg.Algorithm + "-" + cfg.Hex, nil
}

func (s *Store) resolve(ctx context.Context, ref string, policy corev1.PullPolicy) (v1.Image, error) {
	r, err := parseRef(ref, s.baseDir)
	if err != nil {
		return nil, err
	}
	switch r.kind {
	case kindOCIDir:
		st, err := os.Stat(r.path)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			return nil, fmt.Errorf("%s is not an OCI layout directory (for a tar use %s)", r.path, PrefixOCIArchive)
		}
		return layoutImage(dirLayout(r.path), r.selector)
	case kindOCIArchive:
		l, err := openTarLayout(r.path)
		if err != nil {
			return nil, err
		}
		return layoutImage(l, r.selector)
	case kindDockerArchive:
		if _, err := os.Stat(r.path); err != nil {
			return nil, err
		}
		var tag *name.Tag
		if r.selector != "" {
			t, err := name.NewTag(r.selector)
			if err != nil {
				return nil, fmt.Errorf("invalid tag %q: %w", r.selector, err)
			}
			tag = &t
		}
		img, err := tarball.ImageFromPath(r.path, tag)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.path, err)
		}
		return img, nil
	default:
		return s.registryImage(ctx, r, policy)
	}
}

// file returns the cached copy of rel, extracting it if needed.
func (s *Store) file(ctx context.Context, img v1.Image, id, rel string) (string, error) {
	dst := s.rootfsPath(id, rel)
	if isRegular(dst) {
		return dst, nil
	}
	unlock, err := lockFile(ctx, s.lockPath(id, rel))
	if err != nil {
		return "", err
	}
	defer unlock()
	if isRegular(dst) {
		return dst, nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".extract-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	defer tmp.Close()

	want := rel
	for hops := 0; ; hops++ {
		if hops > 16 {
			return "", fmt.Errorf("/%s: too many levels of links", rel)
		}
		h, isDir, err := scanFor(ctx, img, want, tmp)
		if err != nil {
			return "", err
		}
		if h == nil {
			if isDir {
				return "", fmt.Errorf("/%s is a directory", want)
			}
			if want != rel {
				return "", fmt.Errorf("%w: /%s (link target of /%s)", ErrNotFound, want, rel)
			}
			return "", fmt.Errorf("%w: /%s", ErrNotFound, rel)
		}
		switch h.Typeflag {
		case tar.TypeReg:
			return dst, s.commit(tmp, dst)
		case tar.TypeSymlink:
			target := h.Linkname
			if !path.IsAbs(target) {
				target = path.Join(path.Dir(want), target)
			}
			want = tarName(target)
		case tar.TypeLink:
			want = tarName(h.Linkname)
		case tar.TypeDir:
			return "", fmt.Errorf("/%s is a directory", want)
		default:
			return "", fmt.Errorf("/%s is not a regular file (tar type %q)", want, h.Typeflag)
		}
		if err := tmp.Truncate(0); err != nil {
			return "", err
		}
		if _, err := tmp.Seek(0, io.SeekStart); err != nil {
			return "", err
		}
	}
}

// commit makes tmp read-only and renames it to dst.
func (s *Store) commit(tmp *os.File, dst string) error {
	if err := tmp.Chmod(0o444); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return err
	}
	s.extractions.Add(1)
	return nil
}

// scanFor reads the image's whole flattened filesystem (so every layer is
// verified) and copies the regular file named rel to w. It returns rel's
// header (nil if absent) and whether rel is a directory implied by entries
// below it.
func scanFor(ctx context.Context, img v1.Image, rel string, w io.Writer) (*tar.Header, bool, error) {
	rc := mutate.Extract(img)
	defer rc.Close()
	cr := &ctxReader{ctx: ctx, r: rc}
	tr := tar.NewReader(cr)
	var found *tar.Header
	implied := false
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			if err := drain(cr); err != nil {
				return nil, false, err
			}
			return found, implied, nil
		}
		if err != nil {
			return nil, false, err
		}
		n := tarName(h.Name)
		if found == nil && n == rel {
			found = h
			if h.Typeflag == tar.TypeReg {
				if _, err := io.Copy(w, tr); err != nil {
					return nil, false, err
				}
			}
		} else if strings.HasPrefix(n, rel+"/") {
			implied = true
		}
	}
}

// defaultDisk finds the single entry under /disk/ and extracts it.
func (s *Store) defaultDisk(ctx context.Context, img v1.Image, id string) (string, error) {
	record := filepath.Join(s.imageDir(id), "disk-path")
	if b, err := os.ReadFile(record); err == nil {
		if rel, err := cleanImagePath(string(b)); err == nil {
			return s.file(ctx, img, id, rel)
		}
	}
	unlock, err := lockFile(ctx, s.lockPath(id, "disk-path"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if b, err := os.ReadFile(record); err == nil {
		if rel, err := cleanImagePath(string(b)); err == nil {
			return s.file(ctx, img, id, rel)
		}
	}
	if err := os.MkdirAll(s.imageDir(id), 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(s.imageDir(id), ".extract-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()

	// One pass: list /disk's children, copying the first regular file on the
	// way (the usual case: it is the only one).
	rc := mutate.Extract(img)
	defer rc.Close()
	cr := &ctxReader{ctx: ctx, r: rc}
	tr := tar.NewReader(cr)
	children := map[string]bool{}
	copied := ""
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			if err := drain(cr); err != nil {
				return "", err
			}
			break
		}
		if err != nil {
			return "", err
		}
		n := tarName(h.Name)
		rest, ok := strings.CutPrefix(n, DiskDir+"/")
		if !ok {
			continue
		}
		child, _, nested := strings.Cut(rest, "/")
		children[child] = true
		if !nested && copied == "" && h.Typeflag == tar.TypeReg {
			if _, err := io.Copy(tmp, tr); err != nil {
				return "", err
			}
			copied = n
		}
	}
	switch len(children) {
	case 0:
		return "", fmt.Errorf("%w: no disk image under /%s/ (set the containerDisk path)", ErrNotFound, DiskDir)
	case 1:
	default:
		names := make([]string, 0, len(children))
		for c := range children {
			names = append(names, "/"+DiskDir+"/"+c)
		}
		sort.Strings(names)
		return "", fmt.Errorf("%d entries under /%s/ (%s), only one disk is allowed: set the containerDisk path",
			len(names), DiskDir, strings.Join(names, ", "))
	}
	var rel string
	for c := range children {
		rel = DiskDir + "/" + c
	}
	var p string
	if copied == rel {
		p = s.rootfsPath(id, rel)
		if !isRegular(p) {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return "", err
			}
			if err := s.commit(tmp, p); err != nil {
				return "", err
			}
		}
	} else if p, err = s.file(ctx, img, id, rel); err != nil { // a link, or a directory (error)
		return "", err
	}
	if err := writeFileAtomic(record, []byte(rel), 0o644, false); err != nil {
		return "", err
	}
	return p, nil
}

func isRegular(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// writeFileAtomic writes data to p through a temporary file and a rename.
// keep leaves an existing p alone.
func writeFileAtomic(p string, data []byte, mode os.FileMode, keep bool) error {
	if keep {
		if _, err := os.Stat(p); err == nil {
			return nil
		}
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), p)
}

// drain reads what follows the end of the flattened tar: mutate.Extract
// writes the end-of-archive blocks even when a layer failed (a digest
// mismatch, a truncated blob) and reports the failure only after them.
func drain(r io.Reader) error {
	_, err := io.Copy(io.Discard, r)
	return err
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// verifiedImage checks every layer's uncompressed content against the diff
// ID in the image config, which is what the image ID (the cache key) covers.
type verifiedImage struct{ v1.Image }

func (vi verifiedImage) Layers() ([]v1.Layer, error) {
	ls, err := vi.Image.Layers()
	if err != nil {
		return nil, err
	}
	out := make([]v1.Layer, len(ls))
	for i, l := range ls {
		out[i] = verifiedLayer{l}
	}
	return out, nil
}

type verifiedLayer struct{ v1.Layer }

func (vl verifiedLayer) Uncompressed() (io.ReadCloser, error) {
	d, err := vl.DiffID()
	if err != nil {
		return nil, err
	}
	rc, err := vl.Layer.Uncompressed()
	if err != nil {
		return nil, err
	}
	return newVerifier(rc, d, "layer with diff ID")
}
