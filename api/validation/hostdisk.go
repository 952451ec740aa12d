package validation

import (
	"fmt"
	"path"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// HostDiskDirsKey is the kemu-config key (and the controller's, kemu-api's
// and the node agent's --host-disk-dirs flag) naming the host directories
// hostDisks may live under. Default: none, so a cluster refuses every
// hostDisk until an administrator chooses a directory. `kemuctl run` (the
// user's own machine) does not apply it.
const HostDiskDirsKey = "hostDiskDirs"

// ParseHostDiskDirs reads a comma- or space-separated list of absolute,
// clean directories other than "/".
func ParseHostDiskDirs(s string) ([]string, error) {
	var dirs []string
	for _, d := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' }) {
		if !path.IsAbs(d) || path.Clean(d) != d || d == "/" {
			return nil, fmt.Errorf("%s: %q is not an absolute, clean directory other than /", HostDiskDirsKey, d)
		}
		dirs = append(dirs, d)
	}
	return dirs, nil
}

// HostDiskRoot returns the allowed directory p lies strictly beneath, after
// cleaning p.
func HostDiskRoot(p string, allowed []string) (string, bool) {
	p = path.Clean(p)
	for _, d := range allowed {
		if strings.HasPrefix(p, d+"/") {
			return d, true
		}
	}
	return "", false
}

// ValidateHostDisks checks every hostDisk of a VMI against the cluster's
// allowed directories: the path must be clean (no ".", "..", "//" or
// trailing "/", so what is checked is what is mounted) and beneath one of
// them. Symlinks are the node's to check (nodeagent): a path is resolved
// there, without following any.
func ValidateHostDisks(vmi *v1.VirtualMachineInstance, allowed []string) field.ErrorList {
	var errs field.ErrorList
	for i := range vmi.Spec.Volumes {
		hd := vmi.Spec.Volumes[i].HostDisk
		if hd == nil {
			continue
		}
		p := field.NewPath("spec", "volumes").Index(i).Child("hostDisk", "path")
		switch {
		case len(allowed) == 0:
			errs = append(errs, field.Forbidden(p, fmt.Sprintf("hostDisks are not allowed on this cluster (kemu-config %s names no directory)", HostDiskDirsKey)))
		case path.Clean(hd.Path) != hd.Path:
			errs = append(errs, field.Invalid(p, hd.Path, fmt.Sprintf("must be a clean absolute path (no '.', '..', '//' or trailing '/') beneath a directory kemu-config %s allows", HostDiskDirsKey)))
		default:
			if _, ok := HostDiskRoot(hd.Path, allowed); !ok {
				errs = append(errs, field.Forbidden(p, fmt.Sprintf("%q is not beneath a directory kemu-config %s allows (%s)", hd.Path, HostDiskDirsKey, strings.Join(allowed, ", "))))
			}
		}
	}
	return errs
}
