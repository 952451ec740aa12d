// Package configdisk builds the ISO 9660 images KubeVirt gives a guest for
// its config volumes — configMap, secret, serviceAccount, downwardAPI and
// sysprep disks — and for cloudInitConfigDrive: Rock Ridge and Joliet
// names, so a key such as "App.Properties" or "sub/dir/file" arrives in
// the guest as it is named in Kubernetes (KubeVirt runs xorrisofs with
// -rock -joliet; kemu writes the image itself with go-diskfs).
//
// The source of a config volume is the directory the kubelet mounted into
// the launcher Pod (one file per key, through its "..data" symlinks). It
// is read through an os.Root: a symlink leading out of the directory is an
// error, never followed; the kubelet's own entries (names starting with
// "..") are left out; the size and number of files are bounded.
package configdisk

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"
)

// Volume labels (ISO 9660 volume identifiers), KubeVirt's.
const (
	// DefaultLabel labels configMap, secret, serviceAccount and downwardAPI
	// disks whose volume names no volumeLabel.
	DefaultLabel = "cfgdata"
	// SysprepLabel labels sysprep disks (Windows does not look at it).
	SysprepLabel = "unattendCD"
	// MaxLabel is the length of an ISO 9660 volume identifier.
	MaxLabel = 32
)

// Bounds of one image's content. A Secret or ConfigMap holds at most 1 MiB;
// the bounds keep a hostile or broken source from filling the VM's
// directory.
const (
	MaxBytes = 16 << 20
	MaxFiles = 1024
	MaxDepth = 16
)

// pvdLabelOffset is where the primary volume descriptor (sector 16 of 2048
// bytes) keeps the volume identifier (bytes 40 to 71).
const pvdLabelOffset = 16*2048 + 40

// ErrTooLarge is returned when a source exceeds MaxBytes or MaxFiles.
var ErrTooLarge = errors.New("config volume too large")

// FromDir writes an ISO image labelled label at dst holding the files
// below src (a directory the kubelet mounted), following symlinks only
// within src. scratch is a directory for staging (the VM's directory).
func FromDir(dst, label, src, scratch string) error {
	root, err := os.OpenRoot(src)
	if err != nil {
		return fmt.Errorf("config volume: %w", err)
	}
	defer root.Close()
	return write(dst, label, scratch, func(stage string) error {
		c := copier{root: root, stage: stage}
		return c.dir(".", 0)
	})
}

// FromFiles writes an ISO image labelled label at dst holding files (path
// relative to the image's root, '/'-separated → content).
func FromFiles(dst, label string, files map[string][]byte, scratch string) error {
	return write(dst, label, scratch, func(stage string) error {
		var total int64
		for name, data := range files {
			clean := path.Clean(name)
			if !fs.ValidPath(clean) || clean == "." {
				return fmt.Errorf("config volume: bad file name %q", name)
			}
			if total += int64(len(data)); total > MaxBytes || len(files) > MaxFiles {
				return ErrTooLarge
			}
			p := filepath.Join(stage, filepath.FromSlash(clean))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return fmt.Errorf("config volume: %w", err)
			}
			if err := os.WriteFile(p, data, 0o644); err != nil {
				return fmt.Errorf("config volume: %w", err)
			}
		}
		return nil
	})
}

// write stages the content with fill, then writes the image to a temporary
// file renamed to dst (mode 0644). The staging directory is always removed.
func write(dst, label, scratch string, fill func(stage string) error) (err error) {
	if label == "" || len(label) > MaxLabel {
		return fmt.Errorf("config volume: label %q is not 1 to %d characters", label, MaxLabel)
	}
	stage, err := os.MkdirTemp(scratch, "."+filepath.Base(dst)+".stage-*")
	if err != nil {
		return fmt.Errorf("config volume: %w", err)
	}
	defer os.RemoveAll(stage)
	if err := fill(stage); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-*")
	if err != nil {
		return fmt.Errorf("config volume: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	iso, err := iso9660.Create(file.New(tmp, false), 0, 0, 0, stage)
	if err != nil {
		return fmt.Errorf("config volume: %w", err)
	}
	if err := iso.Finalize(iso9660.FinalizeOptions{RockRidge: true, Joliet: true, VolumeIdentifier: label}); err != nil {
		return fmt.Errorf("config volume: writing the ISO image: %w", err)
	}
	// ECMA-119 pads the volume identifier with spaces; go-diskfs pads it
	// with NULs, which blkid shows but not every reader trims.
	if _, err := tmp.WriteAt([]byte(fmt.Sprintf("%-*s", MaxLabel, label)), pvdLabelOffset); err != nil {
		return fmt.Errorf("config volume: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("config volume: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("config volume: %w", err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("config volume: %w", err)
	}
	return nil
}

type copier struct {
	root  *os.Root
	stage string
	files int
	bytes int64
}

// dir copies the directory rel of the root (followed through symlinks that
// stay inside it) into the stage.
func (c *copier) dir(rel string, depth int) error {
	if depth > MaxDepth {
		return fmt.Errorf("config volume: %s is nested deeper than %d directories", rel, MaxDepth)
	}
	d, err := c.root.Open(rel)
	if err != nil {
		return fmt.Errorf("config volume: %w", err)
	}
	entries, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return fmt.Errorf("config volume: %s: %w", rel, err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "..") {
			continue // the kubelet's ..data and timestamped directories
		}
		name := path.Join(rel, e.Name())
		fi, err := c.root.Stat(name) // follows symlinks, refuses any leaving the root
		if err != nil {
			return fmt.Errorf("config volume: %s: %w", name, err)
		}
		switch {
		case fi.IsDir():
			if err := os.Mkdir(filepath.Join(c.stage, filepath.FromSlash(name)), 0o755); err != nil {
				return fmt.Errorf("config volume: %w", err)
			}
			if err := c.dir(name, depth+1); err != nil {
				return err
			}
		case fi.Mode().IsRegular():
			if err := c.file(name); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *copier) file(name string) error {
	if c.files++; c.files > MaxFiles {
		return fmt.Errorf("%w: more than %d files", ErrTooLarge, MaxFiles)
	}
	in, err := c.root.Open(name)
	if err != nil {
		return fmt.Errorf("config volume: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(filepath.Join(c.stage, filepath.FromSlash(name)), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("config volume: %w", err)
	}
	n, err := io.Copy(out, io.LimitReader(in, MaxBytes-c.bytes+1))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("config volume: %s: %w", name, err)
	}
	if c.bytes += n; c.bytes > MaxBytes {
		return fmt.Errorf("%w: more than %d bytes", ErrTooLarge, MaxBytes)
	}
	return nil
}

// Read returns the label and the files (path → content) of an image
// written by FromDir or FromFiles; tests use it to check what a guest gets.
func Read(p string) (label string, files map[string][]byte, err error) {
	f, err := os.Open(p)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", nil, err
	}
	fsys, err := iso9660.Read(file.New(f, true), st.Size(), 0, 0)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", p, err)
	}
	files = map[string][]byte{}
	err = fs.WalkDir(fsys, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		files[name], err = fs.ReadFile(fsys, name)
		return err
	})
	return strings.TrimRight(fsys.Label(), " "), files, err
}
