package validation

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// validateFilesystems checks domain.devices.filesystems: a DNS label of at
// most 36 characters (the virtio-fs tag), virtiofs set, unique, naming a
// volume of a kind that can be shared (v1.FilesystemSource) that no disk
// uses. (KubeVirt's containerPath volumes are not declared: refused as a
// KubeVirt field kemu does not support, docs/api.md "Filesystems".)
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
				"volume %s is a %s: only persistentVolumeClaim, configMap, secret, serviceAccount and downwardAPI volumes can be shared with virtiofs",
				f.Name, volumeKindName(v))))
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
