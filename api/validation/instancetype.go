package validation

import (
	"fmt"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	itv1beta1 "github.com/kemu-dev/kemu/api/instancetype/v1beta1"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// ValidateInstancetype validates a VirtualMachineInstancetype.
func ValidateInstancetype(it *itv1beta1.VirtualMachineInstancetype) field.ErrorList {
	allErrs := Unsupported(it, nil)
	allErrs = append(allErrs, validateObjectMeta(&it.ObjectMeta)...)
	return append(allErrs, ValidateInstancetypeSpec(&it.Spec, field.NewPath("spec"))...)
}

// ValidateClusterInstancetype validates a VirtualMachineClusterInstancetype.
func ValidateClusterInstancetype(it *itv1beta1.VirtualMachineClusterInstancetype) field.ErrorList {
	allErrs := Unsupported(it, nil)
	allErrs = append(allErrs, validateClusterObjectMeta(&it.ObjectMeta)...)
	return append(allErrs, ValidateInstancetypeSpec(&it.Spec, field.NewPath("spec"))...)
}

// ValidatePreference validates a VirtualMachinePreference.
func ValidatePreference(p *itv1beta1.VirtualMachinePreference) field.ErrorList {
	allErrs := Unsupported(p, nil)
	allErrs = append(allErrs, validateObjectMeta(&p.ObjectMeta)...)
	return append(allErrs, ValidatePreferenceSpec(&p.Spec, field.NewPath("spec"))...)
}

// ValidateClusterPreference validates a VirtualMachineClusterPreference.
func ValidateClusterPreference(p *itv1beta1.VirtualMachineClusterPreference) field.ErrorList {
	allErrs := Unsupported(p, nil)
	allErrs = append(allErrs, validateClusterObjectMeta(&p.ObjectMeta)...)
	return append(allErrs, ValidatePreferenceSpec(&p.Spec, field.NewPath("spec"))...)
}

func validateClusterObjectMeta(m *metav1.ObjectMeta) field.ErrorList {
	allErrs := validateObjectMeta(m)
	if m.Namespace != "" {
		allErrs = append(allErrs, field.Forbidden(field.NewPath("metadata", "namespace"), "a cluster-wide object has no namespace"))
	}
	return allErrs
}

// ValidateInstancetypeSpec checks an instance type's supported fields (the
// unsupported ones are reported by Unsupported).
func ValidateInstancetypeSpec(spec *itv1beta1.VirtualMachineInstancetypeSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	cpu := fldPath.Child("cpu")
	switch {
	case spec.CPU.Guest == 0:
		allErrs = append(allErrs, field.Required(cpu.Child("guest"), "the number of vCPUs"))
	case spec.CPU.Guest > MaxVCPUs:
		allErrs = append(allErrs, field.Invalid(cpu.Child("guest"), spec.CPU.Guest, fmt.Sprintf("must be at most %d", MaxVCPUs)))
	}
	if m := spec.CPU.Model; m != nil && (*m == "" || !cpuModelPattern.MatchString(*m) || isHelp(*m)) {
		allErrs = append(allErrs, field.Invalid(cpu.Child("model"), *m, "must be host-passthrough, host-model or a QEMU CPU model name"))
	}
	mem := fldPath.Child("memory")
	switch {
	case spec.Memory.Guest.IsZero():
		allErrs = append(allErrs, field.Required(mem.Child("guest"), "the guest's memory"))
	case spec.Memory.Guest.Cmp(MinGuestMemory) < 0:
		allErrs = append(allErrs, field.Invalid(mem.Child("guest"), spec.Memory.Guest.String(), "must be at least "+MinGuestMemory.String()))
	}
	if p := spec.Memory.OvercommitPercent; p < 0 || p > 100 {
		allErrs = append(allErrs, field.Invalid(mem.Child("overcommitPercent"), p, "must be 0 … 100"))
	}
	allErrs = append(allErrs, metavalidation.ValidateLabels(spec.NodeSelector, fldPath.Child("nodeSelector"))...)
	allErrs = append(allErrs, apivalidation.ValidateAnnotations(spec.Annotations, fldPath.Child("annotations"))...)
	return allErrs
}

// ValidatePreferenceSpec checks a preference's supported fields.
func ValidatePreferenceSpec(spec *itv1beta1.VirtualMachinePreferenceSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if c := spec.CPU; c != nil {
		p := fldPath.Child("cpu")
		if t := c.PreferredCPUTopology; t != nil {
			allErrs = append(allErrs, oneOf(p.Child("preferredCPUTopology"), string(*t), topologies...)...)
		}
		if so := c.SpreadOptions; so != nil {
			sp := p.Child("spreadOptions")
			if so.Across != nil {
				allErrs = append(allErrs, oneOf(sp.Child("across"), string(*so.Across), string(itv1beta1.SpreadAcrossSocketsCores),
					string(itv1beta1.SpreadAcrossCoresThreads), string(itv1beta1.SpreadAcrossSocketsCoresThreads))...)
			}
			if so.Ratio != nil && *so.Ratio == 0 {
				allErrs = append(allErrs, field.Invalid(sp.Child("ratio"), *so.Ratio, "must be at least 1"))
			}
			if so.Across != nil && *so.Across == itv1beta1.SpreadAcrossCoresThreads && so.Ratio != nil && *so.Ratio != 2 {
				allErrs = append(allErrs, field.Invalid(sp.Child("ratio"), *so.Ratio, "CoresThreads spreads 2 threads per core"))
			}
		}
	}
	if d := spec.Devices; d != nil {
		p := fldPath.Child("devices")
		if d.PreferredDiskBus != "" {
			allErrs = append(allErrs, oneOf(p.Child("preferredDiskBus"), string(d.PreferredDiskBus),
				string(v1.DiskBusVirtio), string(v1.DiskBusSATA), string(v1.DiskBusSCSI))...)
		}
		if d.PreferredCdromBus != "" {
			allErrs = append(allErrs, oneOf(p.Child("preferredCdromBus"), string(d.PreferredCdromBus),
				string(v1.DiskBusSATA), string(v1.DiskBusSCSI))...)
		}
		if d.PreferredInterfaceModel != "" {
			allErrs = append(allErrs, oneOf(p.Child("preferredInterfaceModel"), d.PreferredInterfaceModel, interfaceModels...)...)
		}
	}
	if f := spec.Firmware; f != nil {
		p := fldPath.Child("firmware")
		if f.PreferredUseBios != nil && *f.PreferredUseBios && (f.PreferredEfi != nil || f.PreferredUseEfi != nil && *f.PreferredUseEfi) {
			allErrs = append(allErrs, field.Invalid(p.Child("preferredUseBios"), true, "BIOS and EFI are mutually exclusive"))
		}
	}
	if m := spec.Machine; m != nil && m.PreferredMachineType != "" {
		if !q35Pattern.MatchString(m.PreferredMachineType) && !i440fxPattern.MatchString(m.PreferredMachineType) {
			allErrs = append(allErrs, field.NotSupported(fldPath.Child("machine", "preferredMachineType"), m.PreferredMachineType,
				[]string{"q35", "pc-q35-X.Y", "pc", "pc-i440fx-X.Y"}))
		}
	}
	if g := spec.PreferredTerminationGracePeriodSeconds; g != nil && *g < 0 {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("preferredTerminationGracePeriodSeconds"), *g, "must be 0 or more"))
	}
	if r := spec.Requirements; r != nil && r.Memory != nil && r.Memory.Guest.Sign() < 0 {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("requirements", "memory", "guest"), r.Memory.Guest.String(), "must not be negative"))
	}
	allErrs = append(allErrs, apivalidation.ValidateAnnotations(spec.Annotations, fldPath.Child("annotations"))...)
	return allErrs
}

var topologies = []string{
	string(itv1beta1.Sockets), string(itv1beta1.Cores), string(itv1beta1.Threads), string(itv1beta1.Spread), string(itv1beta1.Any),
	string(itv1beta1.DeprecatedPreferSockets), string(itv1beta1.DeprecatedPreferCores), string(itv1beta1.DeprecatedPreferThreads),
	string(itv1beta1.DeprecatedPreferSpread), string(itv1beta1.DeprecatedPreferAny),
}

// ValidateMatchers checks a VM's spec.instancetype and spec.preference as
// KubeVirt's VM admission does: a name or a volume to infer it from (not
// both, nor a kind with inference), a known kind, a volume of the template.
func ValidateMatchers(vm *v1.VirtualMachine, spec *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	check := func(p *field.Path, name, kind, revision, infer string, policy *v1.InferFromVolumeFailurePolicy, kindOK bool) {
		switch {
		case name == "" && infer == "":
			allErrs = append(allErrs, field.Required(p.Child("name"), "either name or inferFromVolume"))
		case infer != "" && name != "":
			allErrs = append(allErrs, field.Forbidden(p.Child("name"), "name is inferred from the volume: clear it to use inferFromVolume"))
		case name != "":
			allErrs = append(allErrs, dnsSubdomain(p.Child("name"), name)...)
		}
		if infer != "" && kind != "" {
			allErrs = append(allErrs, field.Forbidden(p.Child("kind"), "kind is inferred from the volume: clear it to use inferFromVolume"))
		} else if !kindOK {
			allErrs = append(allErrs, field.Invalid(p.Child("kind"), kind, "unknown kind"))
		}
		if revision != "" {
			allErrs = append(allErrs, dnsSubdomain(p.Child("revisionName"), revision)...)
		}
		if infer != "" && vm.Spec.Template != nil && !hasVolume(&vm.Spec.Template.Spec, infer) {
			allErrs = append(allErrs, field.NotFound(p.Child("inferFromVolume"), infer))
		}
		if policy != nil {
			allErrs = append(allErrs, oneOf(p.Child("inferFromVolumeFailurePolicy"), string(*policy),
				string(v1.RejectInferFromVolumeFailure), string(v1.IgnoreInferFromVolumeFailure))...)
		}
	}
	if m := vm.Spec.Instancetype; m != nil {
		_, ok := itv1beta1.InstancetypeKindOf(m.Kind)
		check(spec.Child("instancetype"), m.Name, m.Kind, m.RevisionName, m.InferFromVolume, m.InferFromVolumeFailurePolicy, ok)
	}
	if m := vm.Spec.Preference; m != nil {
		_, ok := itv1beta1.PreferenceKindOf(m.Kind)
		check(spec.Child("preference"), m.Name, m.Kind, m.RevisionName, m.InferFromVolume, m.InferFromVolumeFailurePolicy, ok)
	}
	return allErrs
}

func hasVolume(spec *v1.VirtualMachineInstanceSpec, name string) bool {
	for _, v := range spec.Volumes {
		if v.Name == name {
			return true
		}
	}
	return false
}
