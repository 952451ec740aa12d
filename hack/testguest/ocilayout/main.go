// Command ocilayout writes the test guest's OCI image layouts without Docker:
//
//	OUT/containerdisk/     KubeVirt containerDisk: one layer, /disk/disk.qcow2 (107:107)
//	OUT/kernelboot/        one layer, /boot/vmlinuz and /boot/initrd.img (107:107)
//	OUT/NAME.oci.tar       the layout directory as an OCI archive (tar)
//	OUT/NAME.docker.tar    the image as a `docker save` tarball
//
// Everything carries a fixed timestamp (-epoch), so digests are reproducible
// for identical inputs. Run by hack/testguest/build.sh.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// qemuID is the uid/gid KubeVirt's containerDisks give their files (qemu).
const qemuID = 107

type file struct {
	src  string // host path
	dest string // path in the image, without leading slash
}

type imageSpec struct {
	name  string // layout directory name and tag repository suffix
	files []file
}

func main() {
	out := flag.String("out", "", "output directory")
	disk := flag.String("disk", "", "qcow2 disk image")
	kernel := flag.String("kernel", "", "kernel image")
	initrd := flag.String("initrd", "", "initramfs")
	epoch := flag.Int64("epoch", 946684800, "timestamp (seconds since the epoch) for every file and config")
	flag.Parse()
	if *out == "" || *disk == "" || *kernel == "" || *initrd == "" {
		flag.Usage()
		os.Exit(2)
	}
	ts := time.Unix(*epoch, 0).UTC()
	specs := []imageSpec{
		{name: "containerdisk", files: []file{{*disk, "disk/disk.qcow2"}}},
		{name: "kernelboot", files: []file{{*kernel, "boot/vmlinuz"}, {*initrd, "boot/initrd.img"}}},
	}
	for _, s := range specs {
		if err := build(*out, s, ts); err != nil {
			fmt.Fprintf(os.Stderr, "ocilayout: %s: %v\n", s.name, err)
			os.Exit(1)
		}
	}
}

func build(out string, s imageSpec, ts time.Time) error {
	layerTar, err := layerTar(s.files, ts)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: "amd64",
		OS:           "linux",
		Created:      v1.Time{Time: ts},
		Config:       v1.Config{},
	})
	if err != nil {
		return err
	}
	img, err = mutate.Append(img, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: ts},
			CreatedBy: "hack/testguest/build.sh",
			Comment:   "kemu test guest " + s.name,
		},
	})
	if err != nil {
		return err
	}
	img, err = mutate.CreatedAt(img, v1.Time{Time: ts})
	if err != nil {
		return err
	}

	dir := filepath.Join(out, s.name)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.WriteImage(img); err != nil {
		return err
	}
	// A plain image descriptor: no artifactType (go-containerregistry would
	// fill it with the config media type), a ref name and the platform.
	desc, err := partial.Descriptor(img)
	if err != nil {
		return err
	}
	desc.ArtifactType = ""
	desc.Annotations = map[string]string{"org.opencontainers.image.ref.name": "latest"}
	desc.Platform = &v1.Platform{OS: "linux", Architecture: "amd64"}
	if err := p.AppendDescriptor(*desc); err != nil {
		return err
	}
	if err := tarDir(dir, filepath.Join(out, s.name+".oci.tar"), ts); err != nil {
		return err
	}
	ref, err := name.NewTag("kemu.local/testguest/" + s.name + ":latest")
	if err != nil {
		return err
	}
	if err := tarball.WriteToFile(filepath.Join(out, s.name+".docker.tar"), ref, img); err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s\n", s.name, d)
	return nil
}

// layerTar returns a tar with the parent directories and files, owned by
// 107:107 as `ADD --chown=107:107` would make them.
func layerTar(files []file, ts time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, f := range files {
		for d := path.Dir(f.dest); d != "." && d != "/" && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	dirList := make([]string, 0, len(dirs))
	for d := range dirs {
		dirList = append(dirList, d)
	}
	sort.Strings(dirList)
	for _, d := range dirList {
		if err := tw.WriteHeader(&tar.Header{
			Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755,
			Uid: qemuID, Gid: qemuID, ModTime: ts, Format: tar.FormatPAX,
		}); err != nil {
			return nil, err
		}
	}
	for _, f := range files {
		data, err := os.ReadFile(f.src)
		if err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{
			Typeflag: tar.TypeReg, Name: f.dest, Mode: 0o644, Size: int64(len(data)),
			Uid: qemuID, Gid: qemuID, ModTime: ts, Format: tar.FormatPAX,
		}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// tarDir archives an OCI layout directory (sorted, fixed metadata).
func tarDir(dir, dest string, ts time.Time) error {
	var paths []string
	if err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			paths = append(paths, p)
		}
		return nil
	}); err != nil {
		return err
	}
	sort.Strings(paths)
	f, err := os.Create(dest)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	for _, p := range paths {
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: rel, ModTime: ts, Mode: 0o644, Format: tar.FormatPAX}
		if st.IsDir() {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, rel+"/", 0o755
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			continue
		}
		h.Typeflag, h.Size = tar.TypeReg, st.Size()
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		_, err = io.Copy(tw, src)
		src.Close()
		if err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}
