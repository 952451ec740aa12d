package v1alpha1

import "strings"

// KubeVirt's guest feature and CPU feature types (kubevirt.io/v1 names and
// meanings). Rendering is launcher/cmdline's (build_features.go); what the
// accelerator cannot provide is refused there, by field.

// FeatureAPIC is the local APIC.
type FeatureAPIC struct {
	// Enabled: unset means on (defaulting sets it).
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// EndOfInterrupt enables KVM's paravirtual end-of-interrupt (kvm-pv-eoi);
	// KVM only.
	// +optional
	EndOfInterrupt bool `json:"endOfInterrupt,omitempty"`
}

// FeatureKVM is how KVM's presence is shown to the guest.
type FeatureKVM struct {
	// Hidden hides the KVM hypervisor signature from the guest (kvm=off).
	// +optional
	Hidden bool `json:"hidden,omitempty"`
}

// FeatureSpinlocks is Hyper-V's spinlock retry count.
type FeatureSpinlocks struct {
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// Retries is the number of spinlock retries before the guest notifies
	// the hypervisor: at least 4096 (the default when enabled).
	// +optional
	// +kubebuilder:validation:Minimum=4096
	Retries *uint32 `json:"spinlocks,omitempty"`
}

// FeatureVendorID is the Hyper-V vendor id the guest sees.
type FeatureVendorID struct {
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// VendorID: up to twelve characters.
	// +optional
	// +kubebuilder:validation:MaxLength=12
	VendorID string `json:"vendorid,omitempty"`
}

// SyNICTimer is Hyper-V's synthetic timers, with direct mode.
type SyNICTimer struct {
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// +optional
	Direct *FeatureState `json:"direct,omitempty"`
}

// TLBFlush is Hyper-V's paravirtual TLB flush, with its direct and
// extended variants.
type TLBFlush struct {
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// +optional
	Direct *FeatureState `json:"direct,omitempty"`
	// +optional
	Extended *FeatureState `json:"extended,omitempty"`
}

// FeatureHyperv are the Hyper-V enlightenments (QEMU's hv-* flags). Each
// given one is on unless enabled: false. Dependencies (KubeVirt's): synic,
// ipi and tlbflush need vpindex, synictimer needs synic, evmcs needs vapic
// (and the vmx CPU feature); defaulting turns an unset requirement on.
type FeatureHyperv struct {
	// +optional
	Relaxed *FeatureState `json:"relaxed,omitempty"`
	// +optional
	VAPIC *FeatureState `json:"vapic,omitempty"`
	// +optional
	Spinlocks *FeatureSpinlocks `json:"spinlocks,omitempty"`
	// +optional
	VPIndex *FeatureState `json:"vpindex,omitempty"`
	// +optional
	Runtime *FeatureState `json:"runtime,omitempty"`
	// +optional
	SyNIC *FeatureState `json:"synic,omitempty"`
	// +optional
	SyNICTimer *SyNICTimer `json:"synictimer,omitempty"`
	// +optional
	Reset *FeatureState `json:"reset,omitempty"`
	// +optional
	VendorID *FeatureVendorID `json:"vendorid,omitempty"`
	// +optional
	Frequencies *FeatureState `json:"frequencies,omitempty"`
	// +optional
	Reenlightenment *FeatureState `json:"reenlightenment,omitempty"`
	// +optional
	TLBFlush *TLBFlush `json:"tlbflush,omitempty"`
	// +optional
	IPI *FeatureState `json:"ipi,omitempty"`
	// +optional
	EVMCS *FeatureState `json:"evmcs,omitempty"`
}

// CPUFeature adds or removes one CPU feature.
type CPUFeature struct {
	// Name is the feature's name as QEMU spells it (libvirt's names with
	// '_' are accepted: QEMU treats '_' and '-' alike).
	// +kubebuilder:validation:MaxLength=64
	Name string `json:"name"`
	// Policy (KubeVirt's, default require): force and require turn the
	// feature on and fail the start if the accelerator cannot provide it;
	// optional turns it on only if the accelerator provides it; disable
	// turns it off; forbid turns it off and fails the start if the
	// accelerator provides it.
	// +optional
	// +kubebuilder:validation:Enum=force;require;optional;disable;forbid
	Policy string `json:"policy,omitempty"`
}

// CPU feature policies (KubeVirt's).
const (
	CPUFeaturePolicyForce    = "force"
	CPUFeaturePolicyRequire  = "require"
	CPUFeaturePolicyOptional = "optional"
	CPUFeaturePolicyDisable  = "disable"
	CPUFeaturePolicyForbid   = "forbid"
)

// CPUFeatureVMX is the feature evmcs needs (KubeVirt adds it with require).
const CPUFeatureVMX = "vmx"

// HypervSpinlocksMinRetries is the least (and default) spinlock retry count.
const HypervSpinlocksMinRetries uint32 = 4096

// On says whether a given feature state is on (unset Enabled: on).
func (f *FeatureState) On() bool { return f != nil && (f.Enabled == nil || *f.Enabled) }

// HypervDependency is one of KubeVirt's Hyper-V requirements: Name (a
// field of FeatureHyperv, JSON) needs Requires when it is on.
//
// +kubebuilder:object:generate=false
type HypervDependency struct {
	Name, Requires string
	On, RequiredOn bool
	// required is the requirement's state, for defaulting.
	required **FeatureState
}

// HypervDependencies lists KubeVirt's Hyper-V requirements for h, leaves
// first: evmcs needs vapic; ipi, tlbflush and synic need vpindex;
// synictimer needs synic.
func HypervDependencies(h *FeatureHyperv) []HypervDependency {
	if h == nil {
		return nil
	}
	var timer, tlb *FeatureState
	if h.SyNICTimer != nil {
		timer = &FeatureState{Enabled: h.SyNICTimer.Enabled}
	}
	if h.TLBFlush != nil {
		tlb = &FeatureState{Enabled: h.TLBFlush.Enabled}
	}
	deps := []struct {
		name, requires string
		state          *FeatureState
		required       **FeatureState
	}{
		{"evmcs", "vapic", h.EVMCS, &h.VAPIC},
		{"ipi", "vpindex", h.IPI, &h.VPIndex},
		{"tlbflush", "vpindex", tlb, &h.VPIndex},
		{"synictimer", "synic", timer, &h.SyNIC},
		{"synic", "vpindex", h.SyNIC, &h.VPIndex},
	}
	out := make([]HypervDependency, 0, len(deps))
	for _, d := range deps {
		out = append(out, HypervDependency{Name: d.name, Requires: d.requires, On: d.state.On(),
			RequiredOn: (*d.required).On(), required: d.required})
	}
	return out
}

// setFeatureDefaults is KubeVirt's defaulting of the features kemu has:
// a given feature state is on unless set, Hyper-V spinlocks retry 4096
// times, an unset Hyper-V requirement of an enabled feature is turned on
// (a disabled one is validation's error), evmcs adds the vmx CPU feature
// with policy require, and a CPU feature's policy is require.
func setFeatureDefaults(d *DomainSpec) {
	f := d.Features
	set := func(s *FeatureState) {
		if s != nil && s.Enabled == nil {
			on := true
			s.Enabled = &on
		}
	}
	setB := func(b **bool) {
		if *b == nil {
			on := true
			*b = &on
		}
	}
	if f.APIC != nil {
		setB(&f.APIC.Enabled)
	}
	set(f.Pvspinlock)
	if h := f.Hyperv; h != nil {
		for _, s := range []*FeatureState{h.Relaxed, h.VAPIC, h.VPIndex, h.Runtime, h.SyNIC, h.Reset,
			h.Frequencies, h.Reenlightenment, h.IPI, h.EVMCS} {
			set(s)
		}
		if s := h.Spinlocks; s != nil {
			setB(&s.Enabled)
			if *s.Enabled && s.Retries == nil {
				r := HypervSpinlocksMinRetries
				s.Retries = &r
			}
		}
		if v := h.VendorID; v != nil {
			setB(&v.Enabled)
		}
		if t := h.SyNICTimer; t != nil {
			setB(&t.Enabled)
			set(t.Direct)
		}
		if t := h.TLBFlush; t != nil {
			setB(&t.Enabled)
			set(t.Direct)
			set(t.Extended)
		}
		// Leaves first, so a requirement turned on here turns on its own.
		for {
			changed := false
			for _, dep := range HypervDependencies(h) {
				if dep.On && *dep.required == nil {
					on := true
					*dep.required = &FeatureState{Enabled: &on}
					changed = true
				}
			}
			if !changed {
				break
			}
		}
		if h.EVMCS.On() {
			found := false
			for i := range d.CPU.Features {
				if CPUFeatureKey(d.CPU.Features[i].Name) == CPUFeatureVMX {
					d.CPU.Features[i].Policy = CPUFeaturePolicyRequire
					found = true
				}
			}
			if !found {
				d.CPU.Features = append(d.CPU.Features, CPUFeature{Name: CPUFeatureVMX, Policy: CPUFeaturePolicyRequire})
			}
		}
	}
	for i := range d.CPU.Features {
		if d.CPU.Features[i].Policy == "" {
			d.CPU.Features[i].Policy = CPUFeaturePolicyRequire
		}
	}
}

// CPUFeatureKey is a CPU feature's name as QEMU compares it: '_' and '-'
// are one.
func CPUFeatureKey(name string) string { return strings.ReplaceAll(name, "_", "-") }
