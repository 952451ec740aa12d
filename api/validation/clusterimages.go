package validation

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// The transport prefixes of local image references (skopeo's spelling):
// an OCI image layout directory, an OCI archive, a docker-archive file on
// the machine `kemuctl run` runs on (launcher/images resolves them).
const (
	LocalImageOCI           = "oci:"
	LocalImageOCIArchive    = "oci-archive:"
	LocalImageDockerArchive = "docker-archive:"
)

// LocalImagePrefixes are the prefixes of every local image reference.
var LocalImagePrefixes = []string{LocalImageOCI, LocalImageOCIArchive, LocalImageDockerArchive}

// LocalImageDetail is the reason a cluster refuses image, a local image
// reference with the given prefix.
func LocalImageDetail(image, prefix string) string {
	return fmt.Sprintf("%q: %s references are for kemuctl run only; a cluster pulls images from a registry", image, prefix)
}

// LocalImagePrefix returns the local transport prefix image starts with, or
// "" for a registry reference.
func LocalImagePrefix(image string) string {
	for _, p := range LocalImagePrefixes {
		if strings.HasPrefix(image, p) {
			return p
		}
	}
	return ""
}

// ValidateClusterImages refuses the local image references of a VMI spec
// sent to a cluster (the launcher Pod's containers are pulled by the
// kubelet, which knows no local files): every containerDisk and the
// kernelBoot container. `kemuctl run` does not apply it.
func ValidateClusterImages(spec *v1.VirtualMachineInstanceSpec, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	check := func(p *field.Path, image string) {
		if prefix := LocalImagePrefix(image); prefix != "" {
			errs = append(errs, field.Forbidden(p, LocalImageDetail(image, prefix)))
		}
	}
	if fw := spec.Domain.Firmware; fw != nil && fw.KernelBoot != nil && fw.KernelBoot.Container != nil {
		check(fldPath.Child("domain", "firmware", "kernelBoot", "container", "image"), fw.KernelBoot.Container.Image)
	}
	for i := range spec.Volumes {
		if cd := spec.Volumes[i].ContainerDisk; cd != nil {
			check(fldPath.Child("volumes").Index(i).Child("containerDisk", "image"), cd.Image)
		}
	}
	return errs
}

// ValidateForCluster is what a cluster refuses beyond an object's own
// validation (ValidateVirtualMachineInstance, ValidateVirtualMachine) and
// its configuration (ValidateHostDisks): local image references in a VMI
// or a VM's template. Other kinds have none.
func ValidateForCluster(obj any) field.ErrorList {
	switch o := obj.(type) {
	case *v1.VirtualMachineInstance:
		return ValidateClusterImages(&o.Spec, field.NewPath("spec"))
	case *v1.VirtualMachine:
		if o.Spec.Template == nil {
			return nil
		}
		return ValidateClusterImages(&o.Spec.Template.Spec, field.NewPath("spec", "template", "spec"))
	}
	return nil
}
