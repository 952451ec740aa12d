// kemu-copy copies files into a directory. It is kemu's containerDisk helper:
// a static binary with no dependencies, so it runs inside any image. The
// launcher Pod's first init container copies kemu-copy itself out of the
// launcher image into a shared emptyDir; each containerDisk's init container
// then runs the disk image with that copy:
//
//	kemu-copy SRC... DSTDIR
//
// Each SRC is a file (copied to DSTDIR/<its name>) or a directory (every
// regular file directly in it is copied; none is an error, as a containerDisk
// image without a disk in /disk/ is). Two sources of the same name are an
// error. A symlink is followed. Each file is written to
// a temporary name, synced, made readable by everyone and writable by no one
// (0444; 0555 if its source is executable: QEMU, which runs as its own
// unprivileged user, reads the disks) and renamed, so a file in DSTDIR is
// always complete.
// Exit status: 0 copied; 1 failed; 2 usage.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) < 2 {
		fmt.Fprintln(stderr, "usage: kemu-copy SRC... DSTDIR")
		return 2
	}
	srcs, dst := args[:len(args)-1], args[len(args)-1]
	seen := map[string]string{}
	for _, src := range srcs {
		if prev, dup := seen[filepath.Base(src)]; dup {
			fmt.Fprintf(stderr, "kemu-copy: %s and %s would both be %s\n", prev, src, filepath.Join(dst, filepath.Base(src)))
			return 2
		}
		seen[filepath.Base(src)] = src
	}
	for _, src := range srcs {
		n, err := copyAll(src, dst)
		if err != nil {
			fmt.Fprintln(stderr, "kemu-copy:", err)
			return 1
		}
		fmt.Fprintf(stdout, "kemu-copy: %d file(s) from %s to %s\n", n, src, dst)
	}
	return 0
}

func copyAll(src, dst string) (int, error) {
	st, err := os.Stat(src)
	if err != nil {
		return 0, err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return 0, err
	}
	if !st.IsDir() {
		return 1, copyFile(src, filepath.Join(dst, filepath.Base(src)))
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		p := filepath.Join(src, e.Name())
		fi, err := os.Stat(p)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if err := copyFile(p, filepath.Join(dst, e.Name())); err != nil {
			return n, err
		}
		n++
	}
	if n == 0 {
		return 0, fmt.Errorf("no regular file in %s", src)
	}
	return n, nil
}

func copyFile(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", src)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = io.Copy(tmp, in); err != nil {
		return fmt.Errorf("copying %s: %w", src, err)
	}
	mode := os.FileMode(0o444)
	if st.Mode().Perm()&0o111 != 0 {
		mode = 0o555
	}
	if err = tmp.Chmod(mode); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), dst); err != nil {
		return errors.Join(err, os.Remove(tmp.Name()))
	}
	return nil
}
