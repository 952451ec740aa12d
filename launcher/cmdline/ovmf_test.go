package cmdline

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func touch(t *testing.T, dir string, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("fd"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFindOVMFIn(t *testing.T) {
	debian, other, empty := t.TempDir(), t.TempDir(), t.TempDir()
	touch(t, debian, "OVMF_CODE_4M.fd", "OVMF_VARS_4M.fd", "OVMF_CODE_4M.secboot.fd", "OVMF_VARS_4M.ms.fd",
		"OVMF_CODE.fd", "OVMF_VARS.fd")
	// A code file whose vars template is elsewhere is no pair.
	touch(t, other, "OVMF_CODE.secboot.fd")

	got := FindOVMFIn(empty, other, debian)
	want := OVMF{
		Code: filepath.Join(debian, "OVMF_CODE_4M.fd"), Vars: filepath.Join(debian, "OVMF_VARS_4M.fd"),
		SecureCode: filepath.Join(debian, "OVMF_CODE_4M.secboot.fd"), SecureVars: filepath.Join(debian, "OVMF_VARS_4M.ms.fd"),
	}
	if got != want {
		t.Errorf("FindOVMFIn = %+v\nwant %+v", got, want)
	}

	touch(t, other, "OVMF_VARS.secboot.fd") // Fedora's pair, found first now
	if got := FindOVMFIn(other, debian); got.SecureCode != filepath.Join(other, "OVMF_CODE.secboot.fd") ||
		got.SecureVars != filepath.Join(other, "OVMF_VARS.secboot.fd") || got.Code != want.Code {
		t.Errorf("FindOVMFIn = %+v", got)
	}
	if got := FindOVMFIn(empty); got != (OVMF{}) {
		t.Errorf("FindOVMFIn(empty) = %+v", got)
	}

	if code, vars, err := want.Pick(true); err != nil || code != want.SecureCode || vars != want.SecureVars {
		t.Errorf("Pick(true) = %s, %s, %v", code, vars, err)
	}
	if code, vars, err := want.Pick(false); err != nil || code != want.Code || vars != want.Vars {
		t.Errorf("Pick(false) = %s, %s, %v", code, vars, err)
	}
	if _, _, err := (OVMF{Code: "c", Vars: "v"}).Pick(true); !errors.Is(err, ErrNoOVMF) {
		t.Errorf("Pick(true) without secure files: %v", err)
	}
}

// On this host (Debian's ovmf package), when installed.
func TestFindOVMFHost(t *testing.T) {
	o := FindOVMF()
	if o.Code == "" {
		t.Fatal("no OVMF installed (hack/install-deps.sh installs ovmf)")
	}
	t.Logf("%+v", o)
}
