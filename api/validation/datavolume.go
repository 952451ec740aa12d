package validation

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// ValidateDataVolumeTemplates checks a VM's spec.dataVolumeTemplates by
// KubeVirt's admission rules (its data-volume-template admitter): a name,
// the VM's namespace if any, a template a volume of the VM's template uses
// (dataVolume.name or persistentVolumeClaim.claimName), and the shape of
// CDI's spec — exactly one of pvc and storage; source or sourceRef, or
// external population (a dataSource or dataSourceRef) but not both; a
// source of exactly one kind. kemu does not interpret the spec further:
// CDI's own admission judges it when the DataVolume is created.
func ValidateDataVolumeTemplates(vm *v1.VirtualMachine, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	used := sets.New[string]()
	if vm.Spec.Template != nil {
		for i := range vm.Spec.Template.Spec.Volumes {
			v := &vm.Spec.Template.Spec.Volumes[i]
			switch {
			case v.DataVolume != nil:
				used.Insert(v.DataVolume.Name)
			case v.PersistentVolumeClaim != nil:
				used.Insert(v.PersistentVolumeClaim.ClaimName)
			}
		}
	}
	names := sets.New[string]()
	for i := range vm.Spec.DataVolumeTemplates {
		t := &vm.Spec.DataVolumeTemplates[i]
		tp := p.Index(i)
		np := tp.Child("metadata", "name")
		switch {
		case t.Name == "":
			allErrs = append(allErrs, field.Required(np, "the DataVolume's (and its PVC's) name"))
		case names.Has(t.Name):
			allErrs = append(allErrs, field.Duplicate(np, t.Name))
		default:
			allErrs = append(allErrs, dnsSubdomain(np, t.Name)...)
			if !used.Has(t.Name) {
				allErrs = append(allErrs, field.Invalid(np, t.Name,
					"must be referenced by a volume of spec.template.spec.volumes (dataVolume.name or persistentVolumeClaim.claimName)"))
			}
		}
		names.Insert(t.Name)
		if t.Namespace != "" && vm.Namespace != "" && t.Namespace != vm.Namespace {
			allErrs = append(allErrs, field.Invalid(tp.Child("metadata", "namespace"), t.Namespace,
				fmt.Sprintf("the DataVolume is created in the VM's namespace %s", vm.Namespace)))
		}
		allErrs = append(allErrs, dataVolumeSpec(t, tp.Child("spec"))...)
	}
	return allErrs
}

// dataVolumeSpec checks the shape of CDI's DataVolumeSpec as KubeVirt's
// admitter does, reading only the keys it reads.
func dataVolumeSpec(t *v1.DataVolumeTemplateSpec, p *field.Path) field.ErrorList {
	var spec map[string]json.RawMessage
	if len(t.Spec.Raw) == 0 || string(t.Spec.Raw) == "null" {
		return field.ErrorList{field.Required(p, "CDI's DataVolumeSpec: pvc or storage, and source or sourceRef")}
	}
	if err := json.Unmarshal(t.Spec.Raw, &spec); err != nil {
		return field.ErrorList{field.Invalid(p, string(t.Spec.Raw), "must be an object (CDI's DataVolumeSpec)")}
	}
	set := func(m map[string]json.RawMessage, key string) bool {
		raw, ok := m[key]
		return ok && string(raw) != "null"
	}
	var target map[string]json.RawMessage
	switch {
	case set(spec, "pvc") && set(spec, "storage"):
		return field.ErrorList{field.Invalid(p.Child("storage"), "pvc, storage",
			"both pvc and storage are given: a DataVolume has one target")}
	case set(spec, "pvc"):
		if err := json.Unmarshal(spec["pvc"], &target); err != nil {
			return field.ErrorList{field.Invalid(p.Child("pvc"), string(spec["pvc"]), "must be an object")}
		}
	case set(spec, "storage"):
		if err := json.Unmarshal(spec["storage"], &target); err != nil {
			return field.ErrorList{field.Invalid(p.Child("storage"), string(spec["storage"]), "must be an object")}
		}
	default:
		return field.ErrorList{field.Required(p.Child("storage"), "a DataVolume needs pvc or storage")}
	}
	external := set(target, "dataSource") || set(target, "dataSourceRef")
	sourced := set(spec, "source") || set(spec, "sourceRef")
	switch {
	case external && sourced:
		return field.ErrorList{field.Invalid(p.Child("source"), "source, dataSourceRef",
			"external population (dataSource, dataSourceRef) is incompatible with source and sourceRef")}
	case !external && !sourced:
		return field.ErrorList{field.Required(p.Child("source"),
			"a DataVolume needs source, sourceRef or external population (dataSource, dataSourceRef)")}
	}
	if set(spec, "source") {
		var source map[string]json.RawMessage
		if err := json.Unmarshal(spec["source"], &source); err != nil {
			return field.ErrorList{field.Invalid(p.Child("source"), string(spec["source"]), "must be an object")}
		}
		var kinds []string
		for k := range source {
			if set(source, k) {
				kinds = append(kinds, k)
			}
		}
		slices.Sort(kinds)
		if len(kinds) != 1 {
			return field.ErrorList{field.Invalid(p.Child("source"), strings.Join(kinds, ", "),
				"a DataVolume's source has exactly one kind (http, s3, gcs, registry, pvc, snapshot, upload, blank, imageio, vddk)")}
		}
	}
	return nil
}
