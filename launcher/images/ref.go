package images

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/kemu-dev/kemu/api/validation"
)

// Transport prefixes of local image references (skopeo's spelling), defined
// in api/validation, which refuses them in objects sent to a cluster.
const (
	PrefixOCI           = validation.LocalImageOCI
	PrefixOCIArchive    = validation.LocalImageOCIArchive
	PrefixDockerArchive = validation.LocalImageDockerArchive
)

type refKind int

const (
	kindRegistry refKind = iota
	kindOCIDir
	kindOCIArchive
	kindDockerArchive
)

// imageRef is a parsed image reference.
type imageRef struct {
	raw  string
	kind refKind

	// Local kinds: the absolute path of the layout directory or archive, and
	// what selects an image in it: "" (the only one, else "latest"), a tag,
	// or "@sha256:..." (OCI), or a docker reference such as repo:tag
	// (docker-archive).
	path     string
	selector string

	// kindRegistry.
	ref name.Reference
}

// parseRef parses an image reference; relative local paths are resolved
// against baseDir.
func parseRef(raw, baseDir string) (imageRef, error) {
	r := imageRef{raw: raw}
	if strings.TrimSpace(raw) == "" {
		return r, errors.New("empty image reference")
	}
	var rest string
	switch {
	case strings.HasPrefix(raw, PrefixOCI):
		r.kind, rest = kindOCIDir, raw[len(PrefixOCI):]
	case strings.HasPrefix(raw, PrefixOCIArchive):
		r.kind, rest = kindOCIArchive, raw[len(PrefixOCIArchive):]
	case strings.HasPrefix(raw, PrefixDockerArchive):
		r.kind, rest = kindDockerArchive, raw[len(PrefixDockerArchive):]
	default:
		ref, err := name.ParseReference(raw)
		if err != nil {
			return r, fmt.Errorf("invalid image reference %q: %w", raw, err)
		}
		r.kind, r.ref = kindRegistry, ref
		return r, nil
	}
	if rest == "" {
		return r, fmt.Errorf("invalid image reference %q: no path after the transport", raw)
	}
	r.path, r.selector = splitLocal(rest, baseDir)
	if r.kind == kindDockerArchive && strings.HasPrefix(r.selector, "@") {
		return r, fmt.Errorf("invalid image reference %q: a docker archive is selected by repo:tag, not by digest", raw)
	}
	return r, nil
}

// splitLocal splits PATH[:SELECTOR] or PATH@sha256:HEX. A colon belongs to
// the path when the longer path exists, so paths with colons work.
func splitLocal(s, baseDir string) (path, selector string) {
	abs := func(p string) string {
		if filepath.IsAbs(p) {
			return filepath.Clean(p)
		}
		return filepath.Join(baseDir, p)
	}
	if _, err := os.Stat(abs(s)); err == nil {
		return abs(s), ""
	}
	if i := strings.LastIndex(s, "@"); i > 0 && strings.HasPrefix(s[i+1:], "sha256:") {
		return abs(s[:i]), s[i:]
	}
	// The first colon whose prefix exists; else the last colon after the
	// last slash (a tag on a path that does not exist: reported later).
	for i := 0; i < len(s); i++ {
		if s[i] != ':' || i == 0 {
			continue
		}
		if _, err := os.Stat(abs(s[:i])); err == nil {
			return abs(s[:i]), s[i+1:]
		}
	}
	if i := strings.LastIndex(s, ":"); i > 0 && i > strings.LastIndex(s, "/") && i < len(s)-1 {
		return abs(s[:i]), s[i+1:]
	}
	return abs(s), ""
}

// IsLocal says whether ref names a local OCI layout or archive (which are
// always present, whatever the pull policy).
func IsLocal(ref string) bool {
	return strings.HasPrefix(ref, PrefixOCI) || strings.HasPrefix(ref, PrefixOCIArchive) ||
		strings.HasPrefix(ref, PrefixDockerArchive)
}
