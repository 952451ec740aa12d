package validation

import (
	"fmt"
	"path"
	"strings"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// validateFilesystems checks domain.devices.filesystems: a DNS label of at
// most 36 characters (the virtio-fs tag), virtiofs set, unique, naming a
// volume of a kind that can be shared (v1.FilesystemSource) that no disk
// uses; and containerPath volumes (validateContainerPaths).
func validateFilesystems(spec *v1.VirtualMachineInstanceSpec, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	vols := map[string]*v1.Volume{}
	for i := range spec.Volumes {
		vols[spec.Volumes[i].Name] = &spec.Volumes[i]
	}
	disks := sets.New[string]()
	for _, d := range spec.Domain.Devices.Disks {
		disks.Insert(d.Name)
	}
	seen := sets.New[string]()
	fss := fldPath.Child("domain", "devices", "filesystems")
	for i, f := range spec.Domain.Devices.Filesystems {
		p := fss.Index(i)
		errs = append(errs, dnsLabel(p.Child("name"), f.Name)...)
		if len(f.Name) > v1.MaxFilesystemTagLength {
			errs = append(errs, field.TooLong(p.Child("name"), f.Name, v1.MaxFilesystemTagLength))
		}
		if seen.Has(f.Name) {
			errs = append(errs, field.Duplicate(p.Child("name"), f.Name))
		}
		seen.Insert(f.Name)
		if f.Virtiofs == nil {
			errs = append(errs, field.Required(p.Child("virtiofs"), "virtiofs is the only kind of filesystem"))
		}
		v, ok := vols[f.Name]
		if !ok {
			errs = append(errs, field.Invalid(p.Child("name"), f.Name, "no volume with this name"))
			continue
		}
		if disks.Has(f.Name) {
			errs = append(errs, field.Invalid(p.Child("name"), f.Name, "a disk uses this volume too: a volume is either a disk or a filesystem"))
		}
		if kind, _ := v1.FilesystemSource(v); kind == "" {
			errs = append(errs, field.Invalid(p.Child("name"), f.Name, fmt.Sprintf(
				"volume %s is a %s: only persistentVolumeClaim, configMap, secret, serviceAccount, downwardAPI and containerPath volumes can be shared with virtiofs",
				f.Name, volumeKindName(v))))
		}
	}
	return append(errs, validateContainerPaths(spec, seen, fldPath)...)
}

// ContainerPathReserved are the directories of the launcher container a
// containerPath volume may not share, nor anything below them: kemu's own
// (sockets, the VM's private files, the image cache, claims, config
// volumes) and the container's system trees. The launcher also requires
// the path to be a mount point of its container on a read-only mount
// (launcher/storage), as KubeVirt requires "an existing volumeMount".
var ContainerPathReserved = []string{"/var/run/kemu", "/var/lib/kemu", "/run/kemu", "/proc", "/sys", "/dev", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/boot", "/root", "/tmp"}

// validateContainerPaths: a containerPath volume is shared by a filesystem
// (never a disk), read-only, at a clean absolute path outside
// ContainerPathReserved.
func validateContainerPaths(spec *v1.VirtualMachineInstanceSpec, shared sets.Set[string], fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, v := range spec.Volumes {
		cp := v.ContainerPath
		if cp == nil {
			continue
		}
		p := fldPath.Child("volumes").Index(i).Child("containerPath")
		if !shared.Has(v.Name) {
			errs = append(errs, field.Invalid(fldPath.Child("volumes").Index(i).Child("name"), v.Name,
				"a containerPath volume is shared through a filesystem of its name (domain.devices.filesystems), never a disk"))
		}
		if cp.ReadOnly != nil && !*cp.ReadOnly {
			errs = append(errs, field.Invalid(p.Child("readOnly"), false, "must be true: the guest only reads a containerPath volume (KubeVirt's rule)"))
		}
		switch {
		case cp.Path == "":
			errs = append(errs, field.Required(p.Child("path"), ""))
		case !path.IsAbs(cp.Path) || path.Clean(cp.Path) != cp.Path || strings.Contains(cp.Path, ".."):
			errs = append(errs, field.Invalid(p.Child("path"), cp.Path, "must be a clean absolute path without '..'"))
		case cp.Path == "/" || controlChar(cp.Path) >= 0 || len(cp.Path) > MaxPathLength:
			errs = append(errs, field.Invalid(p.Child("path"), cp.Path, "must name a directory below '/', at most 4095 bytes, without control characters"))
		default:
			for _, r := range ContainerPathReserved {
				if cp.Path == r || strings.HasPrefix(cp.Path, r+"/") {
					errs = append(errs, field.Forbidden(p.Child("path"), fmt.Sprintf(
						"%s is reserved: the launcher container's own files (%s) are not shared with guests", r, strings.Join(ContainerPathReserved, ", "))))
					break
				}
			}
		}
	}
	return errs
}

// volumeKindName is the source of v for a message ("no source" if none).
func volumeKindName(v *v1.Volume) string {
	if s := volumeSources(v); len(s) > 0 {
		return s[0]
	}
	return "volume with no source"
}
