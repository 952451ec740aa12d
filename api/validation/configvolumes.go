package validation

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// MaxVolumeLabel is the longest ISO 9660 volume identifier.
const MaxVolumeLabel = 32

// DownwardAPIFieldPaths are the fieldRef paths a Pod's downwardAPI volume
// takes (besides metadata.labels['k'] and metadata.annotations['k']).
var DownwardAPIFieldPaths = []string{"metadata.name", "metadata.namespace", "metadata.uid", "metadata.labels", "metadata.annotations"}

var downwardAPIKeyed = regexp.MustCompile(`^metadata\.(labels|annotations)\['[^']+'\]$`)

// configVolumeKind names a volume's config source ("" for none): the
// sources the launcher turns into an ISO image from a directory the kubelet
// mounts.
func configVolumeKind(v *v1.Volume) string {
	switch {
	case v.ConfigMap != nil:
		return "configMap"
	case v.Secret != nil:
		return "secret"
	case v.ServiceAccount != nil:
		return "serviceAccount"
	case v.DownwardAPI != nil:
		return "downwardAPI"
	case v.Sysprep != nil:
		return "sysprep"
	}
	return ""
}

// validateConfigVolume checks a configMap, secret, serviceAccount,
// downwardAPI or sysprep volume; serviceAccounts counts serviceAccount
// volumes (a launcher Pod runs as one ServiceAccount).
func validateConfigVolume(v *v1.Volume, p *field.Path, serviceAccounts *int) field.ErrorList {
	var errs field.ErrorList
	if cm := v.ConfigMap; cm != nil {
		errs = append(errs, objectName(p.Child("configMap", "name"), cm.Name)...)
		errs = append(errs, volumeLabel(p.Child("configMap", "volumeLabel"), cm.VolumeLabel)...)
	}
	if s := v.Secret; s != nil {
		errs = append(errs, objectName(p.Child("secret", "secretName"), s.SecretName)...)
		errs = append(errs, volumeLabel(p.Child("secret", "volumeLabel"), s.VolumeLabel)...)
	}
	if sa := v.ServiceAccount; sa != nil {
		if *serviceAccounts++; *serviceAccounts > 1 {
			errs = append(errs, field.Invalid(p.Child("serviceAccount"), v.Name, "a VMI has at most one serviceAccount volume: its launcher Pod runs as that ServiceAccount"))
		}
		errs = append(errs, objectName(p.Child("serviceAccount", "serviceAccountName"), sa.ServiceAccountName)...)
	}
	if d := v.DownwardAPI; d != nil {
		dp := p.Child("downwardAPI")
		errs = append(errs, volumeLabel(dp.Child("volumeLabel"), d.VolumeLabel)...)
		paths := map[string]int{}
		for i, f := range d.Fields {
			errs = append(errs, downwardAPIFile(dp.Child("fields").Index(i), f)...)
			if j, dup := paths[path.Clean(f.Path)]; dup {
				errs = append(errs, field.Duplicate(dp.Child("fields").Index(i).Child("path"), fmt.Sprintf("%s (as fields[%d])", f.Path, j)))
			}
			paths[path.Clean(f.Path)] = i
		}
	}
	if s := v.Sysprep; s != nil {
		sp := p.Child("sysprep")
		switch {
		case (s.ConfigMap == nil) == (s.Secret == nil):
			errs = append(errs, field.Invalid(sp, v.Name, "sysprep names exactly one of configMap and secret"))
		case s.ConfigMap != nil:
			errs = append(errs, objectName(sp.Child("configMap", "name"), s.ConfigMap.Name)...)
		default:
			errs = append(errs, objectName(sp.Child("secret", "name"), s.Secret.Name)...)
		}
	}
	return errs
}

// objectName: a required name of an object of the VMI's namespace.
func objectName(p *field.Path, name string) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	return dnsSubdomain(p, name)
}

// volumeLabel: an ISO 9660 volume identifier, at most 32 printable ASCII
// characters ("" means the default).
func volumeLabel(p *field.Path, label string) field.ErrorList {
	switch {
	case len(label) > MaxVolumeLabel:
		return field.ErrorList{field.TooLong(p, label, MaxVolumeLabel)}
	case strings.IndexFunc(label, func(r rune) bool { return r < 0x20 || r > 0x7e }) >= 0:
		return field.ErrorList{field.Invalid(p, label, "must be printable ASCII: it is the ISO image's volume identifier")}
	case label != strings.TrimSpace(label):
		return field.ErrorList{field.Invalid(p, label, "must not start or end with a space")}
	}
	return nil
}

// downwardAPIFile: what the API server would refuse in the launcher Pod's
// downwardAPI volume, refused here with the VMI's field path instead.
// resourceFieldRef names a container of the launcher Pod, which a VMI's
// author does not know: kemu takes fieldRef only.
func downwardAPIFile(p *field.Path, f corev1.DownwardAPIVolumeFile) field.ErrorList {
	var errs field.ErrorList
	clean := path.Clean(f.Path)
	switch {
	case f.Path == "":
		errs = append(errs, field.Required(p.Child("path"), ""))
	case path.IsAbs(f.Path) || clean == ".." || strings.HasPrefix(clean, "../") || strings.HasPrefix(f.Path, ".."):
		errs = append(errs, field.Invalid(p.Child("path"), f.Path, "must be a relative path that does not start with '..'"))
	case controlChar(f.Path) >= 0 || len(f.Path) > MaxPathLength:
		errs = append(errs, field.Invalid(p.Child("path"), f.Path, "must be a file name without control characters, at most 4095 bytes"))
	}
	if f.ResourceFieldRef != nil {
		errs = append(errs, field.Forbidden(p.Child("resourceFieldRef"), "kemu supports fieldRef only: resourceFieldRef names a container of the launcher Pod"))
	}
	switch {
	case f.FieldRef == nil && f.ResourceFieldRef == nil:
		errs = append(errs, field.Required(p.Child("fieldRef"), ""))
	case f.FieldRef != nil:
		fp := f.FieldRef.FieldPath
		ok := downwardAPIKeyed.MatchString(fp)
		for _, allowed := range DownwardAPIFieldPaths {
			ok = ok || fp == allowed
		}
		if !ok {
			errs = append(errs, field.NotSupported(p.Child("fieldRef", "fieldPath"), fp,
				slices.Concat(DownwardAPIFieldPaths, []string{"metadata.labels['<KEY>']", "metadata.annotations['<KEY>']"})))
		}
		if v := f.FieldRef.APIVersion; v != "" && v != "v1" {
			errs = append(errs, field.NotSupported(p.Child("fieldRef", "apiVersion"), v, []string{"v1"}))
		}
	}
	if f.Mode != nil && (*f.Mode < 0 || *f.Mode > 0o777) {
		errs = append(errs, field.Invalid(p.Child("mode"), *f.Mode, "must be between 0 and 0777 (decimal 511)"))
	}
	return errs
}
