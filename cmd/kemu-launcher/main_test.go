package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kemu-dev/kemu/test/testguest"
)

// buildLauncher builds kemu-launcher into a temp dir.
func buildLauncher(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kemu-launcher")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func shortDir(t testing.TB) string {
	t.Helper()
	return testguest.TempDir(t, "kemu-kl-") // QEMU (uid 107) must traverse it
}

// No Sync within --qemu-timeout: exit 1 with a clear message, socket gone.
func TestQEMUTimeout(t *testing.T) {
	bin := buildLauncher(t)
	dir := shortDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--sockets-dir", filepath.Join(dir, "s"), "--runtime-dir", filepath.Join(dir, "run"),
		"--qemu-timeout", "1s")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("exit: %v, want status 1\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "No VMI arrived (Sync) within --qemu-timeout") {
		t.Errorf("stderr:\n%s", stderr.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "s", "launcher.sock")); !os.IsNotExist(err) {
		t.Errorf("socket left: %v", err)
	}
}

// Bad flags and a bad VMI: exit 2.
func TestBadVMIFlag(t *testing.T) {
	bin := buildLauncher(t)
	dir := shortDir(t)
	cmd := exec.Command(bin, "--sockets-dir", filepath.Join(dir, "s"), "--vmi-json", `{"apiVersion":"kemu.dev/v1alpha1","kind":"VirtualMachineInstance","metadata":{"name":"x"},"spec":{"bogus":1}}`)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "spec.bogus") {
		t.Errorf("exit %v, output:\n%s", err, out)
	}
}

// launcherWithVMI checks for the test guest, builds kemu-launcher and
// writes manifest into a QEMU-reachable temp dir: the repo root (for oci:
// paths), the binary, the dir and the manifest's path.
func launcherWithVMI(t *testing.T, manifest string) (root, bin, dir, vmi string) {
	t.Helper()
	root, err := testguest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testguest.Paths(); err != nil {
		t.Fatal(err)
	}
	bin = buildLauncher(t)
	dir = shortDir(t)
	vmi = filepath.Join(dir, "vmi.yaml")
	if err := os.WriteFile(vmi, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	return root, bin, dir, vmi
}
