package testguest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// ModulePath is the repository's Go module path, used to find its root.
const ModulePath = "github.com/kemu-dev/kemu"

// OutEnv overrides the artifact directory (as for hack/testguest/build.sh);
// a relative value is relative to the repository root.
const OutEnv = "TESTGUEST_OUT"

// ErrNotBuilt is returned (wrapped) by Paths when the artifacts are missing.
var ErrNotBuilt = errors.New("test guest not built: run `bash hack/testguest/build.sh`")

// Artifacts are the files hack/testguest/build.sh produces.
type Artifacts struct {
	Dir    string // the artifact directory, e.g. <repo>/_out/testguest
	Kernel string // vmlinuz
	Initrd string // initrd.img
	Disk   string // disk.qcow2: MBR + FAT + syslinux, boots under SeaBIOS and OVMF

	// OCI image layouts (directories with oci-layout, index.json, blobs/),
	// each with one image tagged "latest" in index.json.
	ContainerDiskOCI string // /disk/disk.qcow2, 107:107
	KernelBootOCI    string // /boot/vmlinuz, /boot/initrd.img, 107:107
	// The same layouts as OCI archives (tar of the layout directory).
	ContainerDiskOCITar string
	KernelBootOCITar    string
	// The same images as `docker save` tarballs
	// (kemu.local/testguest/{containerdisk,kernelboot}:latest).
	ContainerDiskDockerTar string
	KernelBootDockerTar    string

	KernelVersion  string // e.g. 6.1.0-56-amd64
	MarkerProtocol int    // the guest's marker protocol (see Protocol)
}

type manifest struct {
	MarkerProtocol int    `json:"markerProtocol"`
	KernelVersion  string `json:"kernelVersion"`
}

// RepoRoot finds the repository root: the nearest directory at or above the
// working directory (go test runs in the package directory) whose go.mod
// declares ModulePath, else the one above this source file.
func RepoRoot() (string, error) {
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			if isRepoRoot(d) {
				return d, nil
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		d := filepath.Join(filepath.Dir(file), "..", "..")
		if isRepoRoot(d) {
			return filepath.Clean(d), nil
		}
	}
	return "", fmt.Errorf("cannot find the root of %s from the working directory", ModulePath)
}

func isRepoRoot(dir string) bool {
	f, err := os.Open(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		if rest, ok := strings.CutPrefix(line, "module"); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`) == ModulePath
		}
	}
	return false
}

// Dir returns the artifact directory ($TESTGUEST_OUT or <repo>/_out/testguest)
// without checking that it exists.
func Dir() (string, error) {
	if d := os.Getenv(OutEnv); filepath.IsAbs(d) {
		return d, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	if d := os.Getenv(OutEnv); d != "" {
		return filepath.Join(root, d), nil
	}
	return filepath.Join(root, "_out", "testguest"), nil
}

// Paths locates the built artifacts. It fails with ErrNotBuilt when any is
// missing.
func Paths() (Artifacts, error) {
	dir, err := Dir()
	if err != nil {
		return Artifacts{}, err
	}
	a := Artifacts{
		Dir:                    dir,
		Kernel:                 filepath.Join(dir, "vmlinuz"),
		Initrd:                 filepath.Join(dir, "initrd.img"),
		Disk:                   filepath.Join(dir, "disk.qcow2"),
		ContainerDiskOCI:       filepath.Join(dir, "oci", "containerdisk"),
		KernelBootOCI:          filepath.Join(dir, "oci", "kernelboot"),
		ContainerDiskOCITar:    filepath.Join(dir, "oci", "containerdisk.oci.tar"),
		KernelBootOCITar:       filepath.Join(dir, "oci", "kernelboot.oci.tar"),
		ContainerDiskDockerTar: filepath.Join(dir, "oci", "containerdisk.docker.tar"),
		KernelBootDockerTar:    filepath.Join(dir, "oci", "kernelboot.docker.tar"),
	}
	for _, p := range []string{
		a.Kernel, a.Initrd, a.Disk,
		filepath.Join(a.ContainerDiskOCI, "index.json"), filepath.Join(a.KernelBootOCI, "index.json"),
		a.ContainerDiskOCITar, a.KernelBootOCITar, a.ContainerDiskDockerTar, a.KernelBootDockerTar,
	} {
		if _, err := os.Stat(p); err != nil {
			return Artifacts{}, fmt.Errorf("%w (missing %s)", ErrNotBuilt, p)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return Artifacts{}, fmt.Errorf("%w (%v)", ErrNotBuilt, err)
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Artifacts{}, fmt.Errorf("%s: %w", filepath.Join(dir, "manifest.json"), err)
	}
	a.KernelVersion, a.MarkerProtocol = m.KernelVersion, m.MarkerProtocol
	if a.MarkerProtocol != Protocol {
		return Artifacts{}, fmt.Errorf("test guest in %s speaks marker protocol %d, this package %d: rebuild with hack/testguest/build.sh",
			dir, a.MarkerProtocol, Protocol)
	}
	return a, nil
}
