// Package manifests is kemuctl's manifest handling: reading files or standard
// input (Read), and the validate and convert commands.
package manifests

import (
	"io"
	"os"

	"github.com/kemu-dev/kemu/api/manifest"
)

// Read reads the documents of a file, or of stdin for "-".
func Read(name string, stdin io.Reader) ([]*manifest.Document, error) {
	if name == "-" {
		return manifest.Read(stdin)
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return manifest.Read(f)
}
