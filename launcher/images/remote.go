package images

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	corev1 "k8s.io/api/core/v1"

	"github.com/kemu-dev/kemu/api/v1alpha1"
)

// refRecord is what a registry reference resolved to when last pulled.
type refRecord struct {
	Ref        string          `json:"ref"`
	Digest     v1.Hash         `json:"digest"`
	MediaType  types.MediaType `json:"mediaType"`
	Size       int64           `json:"size"`
	ConfigName v1.Hash         `json:"config"`
}

func (s *Store) refRecordPath(ref name.Reference) string {
	sum := sha256.Sum256([]byte(ref.Name()))
	return filepath.Join(s.dir, "refs", hex.EncodeToString(sum[:])+".json")
}

// registryImage returns a registry image from the cache, pulling it first
// when the policy says so.
func (s *Store) registryImage(ctx context.Context, r imageRef, policy corev1.PullPolicy) (v1.Image, error) {
	if policy == "" {
		policy = v1alpha1.DefaultPullPolicy(r.raw)
	}
	switch policy {
	case corev1.PullNever:
		img, err := s.cachedImage(r.ref)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, ErrNotPresent
		}
		return img, err
	case corev1.PullIfNotPresent:
		if img, err := s.cachedImage(r.ref); err == nil {
			return img, nil
		}
	case corev1.PullAlways:
	default:
		return nil, fmt.Errorf("unknown imagePullPolicy %q", policy)
	}
	unlock, err := lockFile(ctx, s.lockPath("pull", r.ref.Name()))
	if err != nil {
		return nil, err
	}
	defer unlock()
	if policy == corev1.PullIfNotPresent { // pulled meanwhile?
		if img, err := s.cachedImage(r.ref); err == nil {
			return img, nil
		}
	}
	return s.pull(ctx, r.ref)
}

// cachedImage is the image ref resolved to when last pulled.
func (s *Store) cachedImage(ref name.Reference) (v1.Image, error) {
	b, err := os.ReadFile(s.refRecordPath(ref))
	if err != nil {
		return nil, err
	}
	var rec refRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("cache record %s: %w", s.refRecordPath(ref), err)
	}
	return imageFromDescriptor(dirLayout(s.ociDir()), v1.Descriptor{MediaType: rec.MediaType, Digest: rec.Digest, Size: rec.Size}, 0)
}

// pull fetches ref's manifest, stores every blob not yet in the cache, and
// records what ref resolved to.
func (s *Store) pull(ctx context.Context, ref name.Reference) (v1.Image, error) {
	opts := append([]remote.Option{
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(authn.DefaultKeychain),
		remote.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH}),
	}, s.remoteOptions...)
	img, err := remote.Image(ref, opts...)
	if err != nil {
		return nil, fmt.Errorf("pull: %w", err)
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, fmt.Errorf("pull: manifest: %w", err)
	}
	for _, l := range m.Layers {
		if s.hasBlob(l.Digest, l.Size) {
			continue
		}
		layer, err := img.LayerByDigest(l.Digest)
		if err != nil {
			return nil, fmt.Errorf("pull: layer %s: %w", l.Digest, err)
		}
		rc, err := layer.Compressed()
		if err != nil {
			return nil, fmt.Errorf("pull: layer %s: %w", l.Digest, err)
		}
		err = s.writeBlob(l.Digest, &ctxReader{ctx: ctx, r: rc})
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("pull: layer %s: %w", l.Digest, err)
		}
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return nil, fmt.Errorf("pull: config: %w", err)
	}
	raw, err := img.RawManifest()
	if err != nil {
		return nil, err
	}
	mt, err := img.MediaType()
	if err != nil {
		return nil, err
	}
	rec := refRecord{Ref: ref.Name(), Digest: digestOf(raw), MediaType: mt, Size: int64(len(raw)), ConfigName: digestOf(cfg)}
	if rec.ConfigName != m.Config.Digest {
		return nil, fmt.Errorf("pull: config has digest %s, manifest says %s", rec.ConfigName, m.Config.Digest)
	}
	for _, b := range [][]byte{cfg, raw} {
		if err := s.writeBlob(digestOf(b), bytes.NewReader(b)); err != nil {
			return nil, err
		}
	}
	recJSON, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	if err := writeFileAtomic(s.refRecordPath(ref), recJSON, 0o644, false); err != nil {
		return nil, err
	}
	s.pulls.Add(1)
	return imageFromDescriptor(dirLayout(s.ociDir()), v1.Descriptor{MediaType: mt, Digest: rec.Digest, Size: rec.Size}, 0)
}

func (s *Store) blobPath(h v1.Hash) string {
	return filepath.Join(s.ociDir(), "blobs", h.Algorithm, h.Hex)
}

func (s *Store) hasBlob(h v1.Hash, size int64) bool {
	st, err := os.Stat(s.blobPath(h))
	return err == nil && st.Mode().IsRegular() && st.Size() == size
}

// writeBlob stores a blob, checking its digest, unless it is there already.
func (s *Store) writeBlob(h v1.Hash, r io.Reader) error {
	dst := s.blobPath(h)
	if isRegular(dst) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	hasher, err := v1.Hasher(h.Algorithm)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".blob-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if _, err := io.Copy(io.MultiWriter(tmp, hasher), r); err != nil {
		return err
	}
	if got := hex.EncodeToString(hasher.Sum(nil)); got != h.Hex {
		return fmt.Errorf("blob %s: received content has digest %s:%s", h, h.Algorithm, got)
	}
	if err := tmp.Chmod(0o444); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}
