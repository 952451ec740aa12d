package cmdline

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// OVMF are the EFI firmware files of this host; "" = not found. Code and
// Vars (and SecureCode and SecureVars) are always a matching pair.
type OVMF struct{ Code, Vars, SecureCode, SecureVars string }

// OVMFDirs are where FindOVMF looks, in order.
var OVMFDirs = []string{"/usr/share/OVMF", "/usr/share/qemu", "/usr/share/edk2/ovmf"}

// ovmfPair is a firmware image and the variable store template built for it.
type ovmfPair struct{ code, vars string }

var (
	// Debian/Ubuntu 4 MiB images first, then the 2 MiB ones.
	plainPairs = []ovmfPair{
		{"OVMF_CODE_4M.fd", "OVMF_VARS_4M.fd"},
		{"OVMF_CODE.fd", "OVMF_VARS.fd"},
	}
	// Secure Boot code (SMM required) with Microsoft's keys enrolled.
	securePairs = []ovmfPair{
		{"OVMF_CODE_4M.secboot.fd", "OVMF_VARS_4M.ms.fd"},
		{"OVMF_CODE.secboot.fd", "OVMF_VARS.ms.fd"},
		{"OVMF_CODE.secboot.fd", "OVMF_VARS.secboot.fd"}, // Fedora
	}
)

// FindOVMF looks for OVMF in OVMFDirs.
func FindOVMF() OVMF { return FindOVMFIn(OVMFDirs...) }

// FindOVMFIn looks for OVMF in dirs: for each kind the first pair whose
// two files exist in the same directory.
func FindOVMFIn(dirs ...string) OVMF {
	var o OVMF
	o.Code, o.Vars = findPair(dirs, plainPairs)
	o.SecureCode, o.SecureVars = findPair(dirs, securePairs)
	return o
}

func findPair(dirs []string, pairs []ovmfPair) (string, string) {
	for _, d := range dirs {
		for _, p := range pairs {
			c, v := filepath.Join(d, p.code), filepath.Join(d, p.vars)
			if isFile(c) && isFile(v) {
				return c, v
			}
		}
	}
	return "", ""
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// ErrNoOVMF is returned (wrapped) when the firmware an EFI VMI needs is
// not on this host.
var ErrNoOVMF = errors.New("OVMF firmware not found on this node (install the ovmf package)")

// Pick returns the firmware code and the variable store template (the file
// the launcher copies to Paths.EFIVars) for Secure Boot on or off.
func (o OVMF) Pick(secureBoot bool) (code, vars string, err error) {
	if secureBoot {
		if o.SecureCode == "" || o.SecureVars == "" {
			return "", "", fmt.Errorf("%w: no Secure Boot build (e.g. OVMF_CODE_4M.secboot.fd with OVMF_VARS_4M.ms.fd)", ErrNoOVMF)
		}
		return o.SecureCode, o.SecureVars, nil
	}
	if o.Code == "" || o.Vars == "" {
		return "", "", fmt.Errorf("%w: no build without Secure Boot (e.g. OVMF_CODE_4M.fd with OVMF_VARS_4M.fd)", ErrNoOVMF)
	}
	return o.Code, o.Vars, nil
}
