package validation

import (
	"slices"
	"testing"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

func TestValidateFeatures(t *testing.T) {
	on, off := ptr(true), ptr(false)
	for _, tc := range []struct {
		name   string
		mutate func(d *v1.DomainSpec)
		want   []string
	}{
		{name: "every feature", mutate: func(d *v1.DomainSpec) {
			d.CPU = &v1.CPU{Model: "qemu64", Features: []v1.CPUFeature{{Name: "avx2"}, {Name: "sse4_2", Policy: "optional"}, {Name: "popcnt", Policy: "disable"}}}
			d.Features = &v1.Features{APIC: &v1.FeatureAPIC{EndOfInterrupt: true}, KVM: &v1.FeatureKVM{Hidden: true},
				Pvspinlock: &v1.FeatureState{Enabled: off},
				Hyperv: &v1.FeatureHyperv{Relaxed: &v1.FeatureState{}, SyNICTimer: &v1.SyNICTimer{Direct: &v1.FeatureState{}},
					Spinlocks: &v1.FeatureSpinlocks{Retries: ptr(uint32(8192))}, VendorID: &v1.FeatureVendorID{VendorID: "KVMKVMKVM"},
					EVMCS: &v1.FeatureState{}}}
		}},
		{name: "apic off", mutate: func(d *v1.DomainSpec) {
			d.Features = &v1.Features{APIC: &v1.FeatureAPIC{Enabled: off}}
		}, want: []string{"Invalid value spec.domain.features.apic.enabled"}},
		{name: "hyperv requirement disabled", mutate: func(d *v1.DomainSpec) {
			d.Features = &v1.Features{Hyperv: &v1.FeatureHyperv{SyNIC: &v1.FeatureState{Enabled: on}, VPIndex: &v1.FeatureState{Enabled: off},
				EVMCS: &v1.FeatureState{Enabled: on}, VAPIC: &v1.FeatureState{Enabled: off}}}
		}, want: []string{"Invalid value spec.domain.features.hyperv.evmcs", "Invalid value spec.domain.features.hyperv.synic"}},
		// KubeVirt's defaulting turns vmx's policy into require for evmcs.
		{name: "evmcs with vmx disabled", mutate: func(d *v1.DomainSpec) {
			d.CPU = &v1.CPU{Features: []v1.CPUFeature{{Name: "vmx", Policy: "disable"}}}
			d.Features = &v1.Features{Hyperv: &v1.FeatureHyperv{EVMCS: &v1.FeatureState{Enabled: on}, VAPIC: &v1.FeatureState{Enabled: on}}}
		}},
		{name: "spinlocks and vendor id", mutate: func(d *v1.DomainSpec) {
			d.Features = &v1.Features{Hyperv: &v1.FeatureHyperv{Spinlocks: &v1.FeatureSpinlocks{Retries: ptr(uint32(100))},
				VendorID: &v1.FeatureVendorID{VendorID: "thirteen-char"}}}
		}, want: []string{"Invalid value spec.domain.features.hyperv.spinlocks.spinlocks",
			"Invalid value spec.domain.features.hyperv.vendorid.vendorid"}},
		{name: "disabled vendor id needs no value", mutate: func(d *v1.DomainSpec) {
			d.Features = &v1.Features{Hyperv: &v1.FeatureHyperv{VendorID: &v1.FeatureVendorID{Enabled: off}}}
		}},
		{name: "cpu features", mutate: func(d *v1.DomainSpec) {
			d.CPU = &v1.CPU{Features: []v1.CPUFeature{{Name: "sse4_2"}, {Name: "sse4-2", Policy: "disable"}, {Name: "Bad,Name"},
				{Name: "hv-relaxed"}, {Name: "kvm-pv-unhalt"}, {Name: "enforce"}, {Name: "avx", Policy: "sometimes"}}}
		}, want: []string{"Duplicate value spec.domain.cpu.features[1].name", "Invalid value spec.domain.cpu.features[2].name",
			"Invalid value spec.domain.cpu.features[3].name", "Invalid value spec.domain.cpu.features[4].name",
			"Invalid value spec.domain.cpu.features[5].name", "Unsupported value spec.domain.cpu.features[6].policy"}},
		{name: "too many cpu features", mutate: func(d *v1.DomainSpec) {
			d.CPU = &v1.CPU{Features: make([]v1.CPUFeature, MaxCPUFeatures+1)}
		}, want: []string{"Too many spec.domain.cpu.features"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vmi := baseVMI()
			tc.mutate(&vmi.Spec.Domain)
			v1.SetVirtualMachineInstanceDefaults(vmi)
			got := errorKeys(ValidateVirtualMachineInstance(vmi))
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("errors %v\nwant %v\n%v", got, want, ValidateVirtualMachineInstance(vmi))
			}
		})
	}
}

// KubeVirt's defaulting: given states on, spinlocks 4096, Hyper-V
// requirements turned on, evmcs adds vmx (require), policy require.
func TestFeatureDefaults(t *testing.T) {
	vmi := baseVMI()
	vmi.Spec.Domain.CPU = &v1.CPU{Features: []v1.CPUFeature{{Name: "avx2"}}}
	vmi.Spec.Domain.Features = &v1.Features{Pvspinlock: &v1.FeatureState{}, APIC: &v1.FeatureAPIC{},
		Hyperv: &v1.FeatureHyperv{SyNICTimer: &v1.SyNICTimer{}, EVMCS: &v1.FeatureState{}, Spinlocks: &v1.FeatureSpinlocks{}}}
	v1.SetVirtualMachineInstanceDefaults(vmi)
	f, h := vmi.Spec.Domain.Features, vmi.Spec.Domain.Features.Hyperv
	switch {
	case !*f.Pvspinlock.Enabled, !*f.APIC.Enabled:
		t.Error("pvspinlock/apic not defaulted on")
	case *h.Spinlocks.Retries != 4096:
		t.Errorf("spinlocks %d", *h.Spinlocks.Retries)
	case !h.SyNIC.On() || !h.VPIndex.On() || !h.VAPIC.On() || h.SyNIC.Enabled == nil:
		t.Errorf("requirements not on: synic %+v vpindex %+v vapic %+v", h.SyNIC, h.VPIndex, h.VAPIC)
	}
	want := []v1.CPUFeature{{Name: "avx2", Policy: "require"}, {Name: "vmx", Policy: "require"}}
	if !slices.Equal(vmi.Spec.Domain.CPU.Features, want) {
		t.Errorf("cpu features %+v", vmi.Spec.Domain.CPU.Features)
	}
	again := vmi.DeepCopy()
	v1.SetVirtualMachineInstanceDefaults(again)
	if !slices.Equal(again.Spec.Domain.CPU.Features, want) {
		t.Errorf("not idempotent: %+v", again.Spec.Domain.CPU.Features)
	}
	if errs := ValidateVirtualMachineInstance(vmi); len(errs) != 0 {
		t.Errorf("defaulted VMI invalid: %v", errs)
	}
}
