package cmdline

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// tcgCPUFacts is QEMU 7.2's answer under TCG (recorded with DetectCPU's
// conversation: testdata/cpu-probe-tcg-qemu7.2.jsonl).
func tcgCPUFacts(t testing.TB) *CPUFacts {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "cpu-probe-tcg-qemu7.2.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	facts, err := ParseCPUProbe(f)
	if err != nil {
		t.Fatal(err)
	}
	return facts
}

func TestParseCPUProbe(t *testing.T) {
	f := tcgCPUFacts(t)
	for name, want := range map[string]bool{"avx2": true, "vmx": false, "svm": true, "lahf-lm": true, "x2apic": false, "hv-relaxed": false} {
		if got, ok := f.Features[name]; !ok || got != want {
			t.Errorf("feature %s: %v (known %v), want %v", name, got, ok, want)
		}
	}
	if _, ok := f.Features["model-id"]; ok {
		t.Error("model-id (a string) taken for a feature")
	}
	if m, ok := f.Models["qemu64"]; !ok || len(m.Unavailable) != 0 {
		t.Errorf("qemu64: %+v %v", m, ok)
	}
	if m := f.Models["Skylake-Client"]; len(m.Unavailable) == 0 {
		t.Error("Skylake-Client usable under TCG 7.2")
	}
	for _, bad := range []string{
		"",
		`{"return": [], "id": "defs"}`,
		`{"error": {"class": "GenericError", "desc": "nope"}, "id": "max"}`,
		`{"return": "x", "id": "defs"}`,
		"not json",
	} {
		if _, err := ParseCPUProbe(strings.NewReader(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// The -cpu argument spec.domain.features and spec.domain.cpu render, and
// what each accelerator refuses by field.
func TestCPUFlags(t *testing.T) {
	f := func(b bool) *v1.FeatureState { return &v1.FeatureState{Enabled: &b} }
	u32 := func(n uint32) *uint32 { return &n }
	for _, tc := range []struct {
		name    string
		accel   string
		noFacts bool
		set     func(d *v1.DomainSpec)
		want    string // -cpu
		wantErr string
	}{
		{name: "named model with features", accel: AccelTCG, set: func(d *v1.DomainSpec) {
			d.CPU.Model = "qemu64"
			d.CPU.Features = []v1.CPUFeature{{Name: "avx2"}, {Name: "popcnt", Policy: "disable"},
				{Name: "avx512f", Policy: "optional"}, {Name: "bmi1", Policy: "optional"},
				{Name: "vmx", Policy: "forbid"}, {Name: "lahf_lm", Policy: "force"}}
		}, want: "qemu64,avx2=on,popcnt=off,bmi1=on,vmx=off,lahf-lm=on"},
		{name: "require what TCG lacks", accel: AccelTCG, set: func(d *v1.DomainSpec) {
			d.CPU.Features = []v1.CPUFeature{{Name: "sse2"}, {Name: "avx512f", Policy: "require"}}
		}, wantErr: `spec.domain.cpu.features[1]: "avx512f" (require): tcg cannot provide it`},
		{name: "force what TCG lacks", accel: AccelTCG, set: func(d *v1.DomainSpec) {
			d.CPU.Features = []v1.CPUFeature{{Name: "vmx", Policy: "force"}}
		}, wantErr: `spec.domain.cpu.features[0]: "vmx" (force)`},
		{name: "forbid what TCG has", accel: AccelTCG, set: func(d *v1.DomainSpec) {
			d.CPU.Features = []v1.CPUFeature{{Name: "sse2", Policy: "forbid"}}
		}, wantErr: `spec.domain.cpu.features[0]: "sse2" (forbid): tcg provides it`},
		{name: "unknown feature", accel: AccelTCG, set: func(d *v1.DomainSpec) {
			d.CPU.Features = []v1.CPUFeature{{Name: "warp-drive", Policy: "disable"}}
		}, wantErr: `spec.domain.cpu.features[0].name: "warp-drive": this node's QEMU has no such CPU feature`},
		{name: "hyperv flag as a cpu feature", accel: AccelTCG, set: func(d *v1.DomainSpec) {
			d.CPU.Features = []v1.CPUFeature{{Name: "hv-relaxed"}}
		}, wantErr: `spec.domain.cpu.features[0].name: "hv-relaxed": a Hyper-V enlightenment`},
		{name: "knob as a cpu feature", accel: AccelTCG, set: func(d *v1.DomainSpec) {
			d.CPU.Features = []v1.CPUFeature{{Name: "enforce"}}
		}, wantErr: `spec.domain.cpu.features[0].name: "enforce": a QEMU CPU property`},
		{name: "features without facts", accel: AccelTCG, noFacts: true, set: func(d *v1.DomainSpec) {
			d.CPU.Features = []v1.CPUFeature{{Name: "avx2", Policy: "disable"}}
		}, wantErr: "Facts.CPU: required by spec.domain.cpu.features"},
		{name: "unknown model", accel: AccelTCG, set: func(d *v1.DomainSpec) { d.CPU.Model = "Pentium-9000" },
			wantErr: `spec.domain.cpu.model: "Pentium-9000": this node's QEMU has no such CPU model`},
		{name: "model not usable under TCG", accel: AccelTCG, set: func(d *v1.DomainSpec) { d.CPU.Model = "Skylake-Client" },
			wantErr: `spec.domain.cpu.model: "Skylake-Client": not usable under tcg, which lacks pcid, x2apic`},
		{name: "named model without facts", accel: AccelTCG, noFacts: true, set: func(d *v1.DomainSpec) { d.CPU.Model = "Skylake-Client" },
			want: "Skylake-Client"},
		{name: "host-passthrough under TCG", accel: AccelTCG, set: func(d *v1.DomainSpec) { d.CPU.Model = v1.CPUModeHostPassthrough },
			wantErr: "spec.domain.cpu.model: host-passthrough needs KVM"},
		{name: "host-passthrough under KVM", accel: AccelKVM, noFacts: true, set: func(d *v1.DomainSpec) { d.CPU.Model = v1.CPUModeHostPassthrough },
			want: "host"},
		{name: "off features and kvm hidden under TCG", accel: AccelTCG, set: func(d *v1.DomainSpec) {
			d.Features.KVM = &v1.FeatureKVM{Hidden: true}
			d.Features.Pvspinlock = f(false)
			d.Features.Hyperv = &v1.FeatureHyperv{Relaxed: f(false), SyNICTimer: &v1.SyNICTimer{Enabled: new(bool)}}
		}, want: "max,kvm=off,kvm-pv-unhalt=off,hv-relaxed=off,hv-stimer=off"},
		{name: "pvspinlock under TCG", accel: AccelTCG, set: func(d *v1.DomainSpec) { d.Features.Pvspinlock = &v1.FeatureState{} },
			wantErr: "spec.domain.features.pvspinlock: needs KVM; this node runs QEMU under tcg"},
		{name: "apic eoi under TCG", accel: AccelTCG, set: func(d *v1.DomainSpec) { d.Features.APIC = &v1.FeatureAPIC{EndOfInterrupt: true} },
			wantErr: "spec.domain.features.apic.endOfInterrupt: needs KVM"},
		{name: "evmcs under TCG: defaulting requires vmx", accel: AccelTCG, set: func(d *v1.DomainSpec) {
			d.Features.Hyperv = &v1.FeatureHyperv{EVMCS: &v1.FeatureState{}}
		}, wantErr: `spec.domain.cpu.features[0]: "vmx" (require): tcg cannot provide it`},
		{name: "relaxed under TCG", accel: AccelTCG, set: func(d *v1.DomainSpec) {
			d.Features.Hyperv = &v1.FeatureHyperv{Relaxed: &v1.FeatureState{}}
		}, wantErr: "spec.domain.features.hyperv.relaxed: needs KVM"},
		{name: "every enlightenment under KVM", accel: AccelKVM, set: func(d *v1.DomainSpec) {
			d.CPU.Model = "host-model"
			d.Features.APIC = &v1.FeatureAPIC{EndOfInterrupt: true}
			d.Features.KVM = &v1.FeatureKVM{Hidden: true}
			d.Features.Pvspinlock = &v1.FeatureState{}
			d.Features.Hyperv = &v1.FeatureHyperv{Relaxed: &v1.FeatureState{}, VAPIC: &v1.FeatureState{},
				Spinlocks: &v1.FeatureSpinlocks{Retries: u32(8191)}, VPIndex: &v1.FeatureState{}, Runtime: &v1.FeatureState{},
				SyNIC: &v1.FeatureState{}, SyNICTimer: &v1.SyNICTimer{Direct: &v1.FeatureState{}}, Reset: &v1.FeatureState{},
				VendorID: &v1.FeatureVendorID{VendorID: "KVMKVMKVM"}, Frequencies: &v1.FeatureState{},
				Reenlightenment: &v1.FeatureState{}, TLBFlush: &v1.TLBFlush{Direct: &v1.FeatureState{}, Extended: &v1.FeatureState{}},
				IPI: &v1.FeatureState{}, EVMCS: f(false)}
		}, want: "host,kvm-pv-eoi=on,kvm=off,kvm-pv-unhalt=on,hv-relaxed=on,hv-vapic=on,hv-spinlocks=0x1fff,hv-vpindex=on," +
			"hv-runtime=on,hv-synic=on,hv-stimer=on,hv-stimer-direct=on,hv-reset=on,hv-vendor-id=KVMKVMKVM,hv-frequencies=on," +
			"hv-reenlightenment=on,hv-tlbflush=on,hv-tlbflush-direct=on,hv-tlbflush-ext=on,hv-ipi=on,hv-evmcs=off"},
		{name: "spinlocks defaulted", accel: AccelKVM, set: func(d *v1.DomainSpec) {
			d.Features.Hyperv = &v1.FeatureHyperv{Spinlocks: &v1.FeatureSpinlocks{}}
		}, want: "host,hv-spinlocks=0x1000"},
		{name: "vendor id with a comma", accel: AccelKVM, set: func(d *v1.DomainSpec) {
			d.Features.Hyperv = &v1.FeatureHyperv{VendorID: &v1.FeatureVendorID{VendorID: "a,b"}}
		}, wantErr: `spec.domain.features.hyperv.vendorid.vendorid: "a,b"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := baseInput(t, baseYAML)
			in.Facts.Accel = tc.accel
			if !tc.noFacts {
				in.Facts.CPU = tcgCPUFacts(t) // KVM rows use no named model or feature
			}
			tc.set(&in.VMI.Spec.Domain)
			v1.SetVirtualMachineInstanceDefaults(in.VMI)
			argv, err := Build(in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := argAfter(argv, "-cpu"); got != tc.want {
				t.Errorf("-cpu %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestNeedsCPUFacts(t *testing.T) {
	for _, tc := range []struct {
		model string
		n     int
		want  bool
	}{{"host-model", 0, false}, {"host-passthrough", 0, false}, {"", 0, false}, {"host-model", 1, true}, {"qemu64", 0, true}} {
		if got := NeedsCPUFacts(tc.model, tc.n); got != tc.want {
			t.Errorf("%q %d: %v", tc.model, tc.n, got)
		}
	}
}
