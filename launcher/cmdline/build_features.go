package cmdline

import (
	"strconv"
	"strings"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/api/validation"
)

// cpu is -cpu: the model (cpuModel) and its flags — spec.domain.cpu.features
// (cpuFeatureFlags) and the hypervisor features of spec.domain.features
// (hypervisorFlags). What the accelerator cannot provide fails the build
// with the field's path.
func (b *builder) cpu() CPU {
	c := CPU{Model: b.cpuModel()}
	c.Flags = append(c.Flags, b.cpuFeatureFlags()...)
	c.Flags = append(c.Flags, b.hypervisorFlags()...)
	if b.timers.hvTime { // spec.domain.clock.timer.hyperv (KVM only)
		c.Flags = append(c.Flags, CPUFlag{Name: "hv-time", Value: "on"})
	}
	if b.timers.kvmclockOff { // spec.domain.clock.timer.kvm.present: false (KVM only)
		c.Flags = append(c.Flags, CPUFlag{Name: "kvmclock", Value: "off"})
	}
	return c
}

// cpuModel: host-model is -cpu host under KVM and -cpu max (everything TCG
// emulates) under TCG; host-passthrough is -cpu host and needs KVM; a named
// model must be one of QEMU's and usable under the accelerator (when the
// CPU facts were detected; otherwise QEMU judges it).
func (b *builder) cpuModel() string {
	const path = "spec.domain.cpu.model"
	kvm := b.in.Facts.Accel == AccelKVM
	model := b.vmi.Spec.Domain.CPU.Model
	switch model {
	case v1.CPUModeHostModel, "":
		if kvm {
			return "host"
		}
		return "max"
	case v1.CPUModeHostPassthrough:
		if !kvm {
			b.fail(path, "host-passthrough needs KVM; this node runs QEMU under %s (use host-model or a named model)", b.in.Facts.Accel)
		}
		return "host"
	}
	b.val(path, model)
	if f := b.in.Facts.CPU; f != nil {
		m, ok := f.Models[model]
		switch {
		case !ok:
			b.fail(path, "%q: this node's QEMU has no such CPU model (query-cpu-definitions)", model)
		case len(m.Unavailable) > 0:
			b.fail(path, "%q: not usable under %s, which lacks %s", model, b.in.Facts.Accel, strings.Join(m.Unavailable, ", "))
		}
	}
	return model
}

// cpuFeatureFlags renders spec.domain.cpu.features with KubeVirt's
// policies; every feature needs the CPU facts (what the accelerator
// provides: QEMU's "max" model expanded under it).
func (b *builder) cpuFeatureFlags() []CPUFlag {
	feats := b.vmi.Spec.Domain.CPU.Features
	if len(feats) == 0 {
		return nil
	}
	f := b.in.Facts.CPU
	if f == nil {
		b.fail("Facts.CPU", "required by spec.domain.cpu.features (DetectCPU)")
		return nil
	}
	accel := b.in.Facts.Accel
	var flags []CPUFlag
	for i, feat := range feats {
		path := "spec.domain.cpu.features[" + strconv.Itoa(i) + "]"
		name := v1.CPUFeatureKey(feat.Name)
		if why := validation.NotACPUFeature(name); why != "" {
			b.fail(path+".name", "%q: %s", feat.Name, why)
			continue
		}
		provided, known := f.Features[name]
		if !known {
			b.fail(path+".name", "%q: this node's QEMU has no such CPU feature", feat.Name)
			continue
		}
		policy := feat.Policy
		if policy == "" {
			policy = v1.CPUFeaturePolicyRequire
		}
		switch policy {
		case v1.CPUFeaturePolicyRequire, v1.CPUFeaturePolicyForce:
			if !provided {
				b.fail(path, "%q (%s): %s cannot provide it on this node", feat.Name, policy, accel)
				continue
			}
			flags = append(flags, CPUFlag{name, "on"})
		case v1.CPUFeaturePolicyOptional:
			if provided {
				flags = append(flags, CPUFlag{name, "on"})
			}
		case v1.CPUFeaturePolicyDisable:
			flags = append(flags, CPUFlag{name, "off"})
		case v1.CPUFeaturePolicyForbid:
			if provided {
				b.fail(path, "%q (forbid): %s provides it on this node", feat.Name, accel)
				continue
			}
			flags = append(flags, CPUFlag{name, "off"})
		default:
			b.fail(path+".policy", "%q: must be force, require, optional, disable or forbid", feat.Policy)
		}
	}
	return flags
}

// hypervisorFlags renders spec.domain.features' CPU side: Hyper-V
// enlightenments (hv-*), kvm.hidden (kvm=off), pvspinlock (kvm-pv-unhalt)
// and apic.endOfInterrupt (kvm-pv-eoi). Enlightenments and paravirtual
// features turned on need KVM: QEMU accepts them under TCG but the guest
// would not see them, so they are refused by name.
func (b *builder) hypervisorFlags() []CPUFlag {
	feats := b.vmi.Spec.Domain.Features
	if feats == nil {
		return nil
	}
	kvm := b.in.Facts.Accel == AccelKVM
	var flags []CPUFlag
	onOff := func(path, flag string, on bool) {
		if on && !kvm {
			b.fail(path, "needs KVM; this node runs QEMU under %s, where the guest would not see %s", b.in.Facts.Accel, flag)
			return
		}
		v := "off"
		if on {
			v = "on"
		}
		flags = append(flags, CPUFlag{flag, v})
	}
	state := func(path, flag string, s *v1.FeatureState) {
		if s != nil {
			onOff(path, flag, s.On())
		}
	}
	const fp = "spec.domain.features"
	if a := feats.APIC; a != nil && a.EndOfInterrupt {
		onOff(fp+".apic.endOfInterrupt", "kvm-pv-eoi", true)
	}
	if k := feats.KVM; k != nil && k.Hidden {
		// No KVM signature for the guest; under TCG it has none anyway.
		flags = append(flags, CPUFlag{"kvm", "off"})
	}
	state(fp+".pvspinlock", "kvm-pv-unhalt", feats.Pvspinlock)
	h := feats.Hyperv
	if h == nil {
		return flags
	}
	const hp = fp + ".hyperv"
	state(hp+".relaxed", "hv-relaxed", h.Relaxed)
	state(hp+".vapic", "hv-vapic", h.VAPIC)
	if s := h.Spinlocks; s != nil && on(s.Enabled) {
		retries := v1.HypervSpinlocksMinRetries
		if s.Retries != nil {
			retries = *s.Retries
		}
		if retries < v1.HypervSpinlocksMinRetries {
			b.fail(hp+".spinlocks.spinlocks", "%d: must be at least %d", retries, v1.HypervSpinlocksMinRetries)
		}
		if !kvm {
			b.fail(hp+".spinlocks", "needs KVM; this node runs QEMU under %s, where the guest would not see hv-spinlocks", b.in.Facts.Accel)
		}
		flags = append(flags, CPUFlag{"hv-spinlocks", "0x" + strconv.FormatUint(uint64(retries), 16)})
	}
	state(hp+".vpindex", "hv-vpindex", h.VPIndex)
	state(hp+".runtime", "hv-runtime", h.Runtime)
	state(hp+".synic", "hv-synic", h.SyNIC)
	if t := h.SyNICTimer; t != nil {
		onOff(hp+".synictimer", "hv-stimer", on(t.Enabled))
		state(hp+".synictimer.direct", "hv-stimer-direct", t.Direct)
	}
	state(hp+".reset", "hv-reset", h.Reset)
	if v := h.VendorID; v != nil && on(v.Enabled) {
		if !kvm {
			b.fail(hp+".vendorid", "needs KVM; this node runs QEMU under %s, where the guest would not see hv-vendor-id", b.in.Facts.Accel)
		}
		if !validation.HypervVendorID.MatchString(v.VendorID) {
			b.fail(hp+".vendorid.vendorid", "%q: 1 to 12 letters, digits, '_', '.', '+', '-'", v.VendorID)
		}
		flags = append(flags, CPUFlag{"hv-vendor-id", v.VendorID})
	}
	state(hp+".frequencies", "hv-frequencies", h.Frequencies)
	state(hp+".reenlightenment", "hv-reenlightenment", h.Reenlightenment)
	if t := h.TLBFlush; t != nil {
		onOff(hp+".tlbflush", "hv-tlbflush", on(t.Enabled))
		state(hp+".tlbflush.direct", "hv-tlbflush-direct", t.Direct)
		state(hp+".tlbflush.extended", "hv-tlbflush-ext", t.Extended)
	}
	state(hp+".ipi", "hv-ipi", h.IPI)
	state(hp+".evmcs", "hv-evmcs", h.EVMCS)
	return flags
}

// on is an Enabled that defaults to true.
func on(enabled *bool) bool { return enabled == nil || *enabled }
