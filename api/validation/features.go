package validation

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

var (
	// HypervVendorID is what features.hyperv.vendorid.vendorid may be:
	// KubeVirt's "up to twelve characters", in letters, digits and
	// '_', '.', '+', '-' (the value goes into -cpu, which QEMU splits at
	// commas without escaping).
	HypervVendorID = regexp.MustCompile(`^[A-Za-z0-9_.+-]{1,12}$`)
	// CPUFeatureName is what cpu.features[].name may be (QEMU's and
	// libvirt's feature names).
	CPUFeatureName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)
)

// MaxCPUFeatures bounds cpu.features.
const MaxCPUFeatures = 128

var cpuFeaturePolicies = []string{v1.CPUFeaturePolicyForce, v1.CPUFeaturePolicyRequire,
	v1.CPUFeaturePolicyOptional, v1.CPUFeaturePolicyDisable, v1.CPUFeaturePolicyForbid}

// validateCPUFeatures checks spec.domain.cpu.features: names, policies, no
// name twice. Whether QEMU and the accelerator have a feature is the
// launcher's check (launcher/cmdline).
func validateCPUFeatures(feats []v1.CPUFeature, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(feats) > MaxCPUFeatures {
		return append(errs, field.TooMany(p, len(feats), MaxCPUFeatures))
	}
	seen := map[string]int{}
	for i, f := range feats {
		fp := p.Index(i)
		if !CPUFeatureName.MatchString(f.Name) {
			errs = append(errs, field.Invalid(fp.Child("name"), f.Name,
				"must be a CPU feature name: lower-case letters, digits, '_', '.', '-', at most 64"))
			continue
		}
		if why := NotACPUFeature(v1.CPUFeatureKey(f.Name)); why != "" {
			errs = append(errs, field.Invalid(fp.Child("name"), f.Name, why))
			continue
		}
		// QEMU treats '_' and '-' alike: sse4_2 and sse4-2 are one feature.
		key := v1.CPUFeatureKey(f.Name)
		if j, dup := seen[key]; dup {
			errs = append(errs, field.Duplicate(fp.Child("name"), fmt.Sprintf("%s (also features[%d])", f.Name, j)))
		}
		seen[key] = i
		if f.Policy != "" && !slices.Contains(cpuFeaturePolicies, f.Policy) {
			errs = append(errs, field.NotSupported(fp.Child("policy"), f.Policy, cpuFeaturePolicies))
		}
	}
	return errs
}

// validateFeatures checks spec.domain.features' apic, hyperv, kvm and
// pvspinlock (acpi and smm are validateDomain's): what no node can do and
// KubeVirt's Hyper-V dependencies. Whether the accelerator can provide an
// enlightenment is the launcher's check (KVM only).
func validateFeatures(f *v1.Features, cpu *v1.CPU, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if f == nil {
		return nil
	}
	if a := f.APIC; a != nil && a.Enabled != nil && !*a.Enabled {
		errs = append(errs, field.Invalid(p.Child("apic", "enabled"), false,
			"not supported by kemu: the q35 and pc machines always give the guest a local APIC (libvirt renders nothing for it on x86 either)"))
	}
	h := f.Hyperv
	if h == nil {
		return errs
	}
	hp := p.Child("hyperv")
	if s := h.Spinlocks; s != nil && enabled(s.Enabled) && s.Retries != nil && *s.Retries < v1.HypervSpinlocksMinRetries {
		errs = append(errs, field.Invalid(hp.Child("spinlocks", "spinlocks"), *s.Retries,
			fmt.Sprintf("must be at least %d", v1.HypervSpinlocksMinRetries)))
	}
	if v := h.VendorID; v != nil && enabled(v.Enabled) && !HypervVendorID.MatchString(v.VendorID) {
		errs = append(errs, field.Invalid(hp.Child("vendorid", "vendorid"), v.VendorID,
			"must be 1 to 12 letters, digits, '_', '.', '+', '-'"))
	}
	for _, d := range v1.HypervDependencies(h) {
		if d.On && !d.RequiredOn {
			errs = append(errs, field.Invalid(hp.Child(d.Name), "enabled",
				fmt.Sprintf("requires %s, which is disabled", hp.Child(d.Requires))))
		}
	}
	if h.EVMCS.On() {
		ok := false
		for _, c := range cpuFeatures(cpu) {
			if v1.CPUFeatureKey(c.Name) == v1.CPUFeatureVMX && (c.Policy == "" || c.Policy == v1.CPUFeaturePolicyRequire || c.Policy == v1.CPUFeaturePolicyForce) {
				ok = true
			}
		}
		if !ok {
			errs = append(errs, field.Invalid(hp.Child("evmcs"), "enabled",
				"requires the vmx CPU feature (defaulting adds spec.domain.cpu.features {name: vmx, policy: require}); it is disabled"))
		}
	}
	return errs
}

func cpuFeatures(c *v1.CPU) []v1.CPUFeature {
	if c == nil {
		return nil
	}
	return c.Features
}

func enabled(b *bool) bool { return b == nil || *b }

// cpuKnobs are -cpu's boolean properties that are not CPUID features.
var cpuKnobs = []string{"check", "enforce", "migratable", "l3-cache", "legacy-cache", "full-cpuid-auto-level",
	"fill-mtrr-mask", "vmware-cpuid-freq", "cpuid-0xb", "lmce", "pmu", "start-powered-off", "kvm"}

// NotACPUFeature says why a -cpu property (QEMU's spelling) is not for
// spec.domain.cpu.features; "" if it may be one.
func NotACPUFeature(name string) string {
	switch {
	case strings.HasPrefix(name, "hv-"):
		return "a Hyper-V enlightenment: set it in spec.domain.features.hyperv"
	case strings.HasPrefix(name, "kvm"):
		return "a KVM paravirtual property: see spec.domain.features.kvm, .pvspinlock and .apic"
	case strings.HasPrefix(name, "x-"), strings.HasPrefix(name, "host-"), strings.HasPrefix(name, "tcg-"),
		slices.Contains(cpuKnobs, name):
		return "a QEMU CPU property, not a CPU feature"
	}
	return ""
}
