package selinux

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	goselinux "github.com/opencontainers/selinux/go-selinux"
)

// PodFileType is the file type of a container's files (container-selinux);
// a VM whose launcher runs in a pod gets its files labelled with it and the
// pod's own level.
const PodFileType = "container_file_t"

// ForVM chooses the labels of one VM's QEMU and files. own is the
// launcher's own process label; running are the process labels of the
// other processes on the node (RunningLabels), so a new pair is not one that
// a running VM holds.
//
//   - In a pod the container runtime gave the launcher a category pair of
//     its own (e.g. container_t:s0:c12,c345), unique on the node. One pod
//     runs one VM, so QEMU keeps the launcher's label and its files get the
//     pod's file type with the same level: two VMs differ exactly as two
//     pods do, and no extra policy module is needed.
//   - Standalone (kemuctl run; the launcher's label has no category pair,
//     e.g. unconfined_t:s0-s0:c0.c1023) it is sVirt: a fresh pair for
//     cfg's types (svirt_t / svirt_image_t), drawn at random among those no
//     running process of cfg.ProcessType holds.
func ForVM(cfg Config, own string, running []string) (Label, error) {
	if err := cfg.validate(); err != nil {
		return Label{}, err
	}
	if own == "" {
		return Label{}, errors.New("selinux: the launcher's own label is empty")
	}
	ctx, err := goselinux.NewContext(own)
	if err != nil {
		return Label{}, fmt.Errorf("selinux: the launcher's own label %q: %w", own, err)
	}
	if _, _, _, err := ParseLevel(ctx["level"]); err == nil {
		file, _ := goselinux.NewContext("")
		file["user"], file["role"], file["type"], file["level"] = ctx["user"], cfg.FileRole, PodFileType, ctx["level"]
		return Label{Process: own, File: file.Get()}, nil
	}
	cfg.ProcessRegistry = false // the pairs of other processes are passed in, not this process's registry
	l, err := NewLabeler(cfg)
	if err != nil {
		return Label{}, err
	}
	for _, r := range running {
		c, err := goselinux.NewContext(r)
		if err != nil || c["type"] != cfg.ProcessType {
			continue
		}
		// Other sensitivities or ranges are not ours to judge: ignore them.
		_ = l.Reserve(c["level"])
	}
	return l.Allocate()
}

// RunningLabels returns the process labels of every process on the host
// (from /proc/<pid>/attr/current); processes that vanish are skipped.
func RunningLabels() []string {
	dirs, _ := filepath.Glob("/proc/[0-9]*/attr/current")
	var out []string
	for _, p := range dirs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if s := strings.TrimRight(string(b), "\x00\n"); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// LabelTree gives dir and everything below it l's file label (sockets
// created later inherit it from the directory). A no-op when SELinux is
// disabled; errors of every path are joined.
func (l Label) LabelTree(dir string) error {
	if skip() {
		return nil
	}
	var paths []string
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		paths = append(paths, p)
		return nil
	})
	if err != nil {
		return fmt.Errorf("selinux: walking %s: %w", dir, err)
	}
	return l.LabelFiles(paths...)
}
