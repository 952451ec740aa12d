package validation

import (
	"slices"
	"testing"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

func TestClockWatchdogInputs(t *testing.T) {
	ptr := func(b bool) *bool { return &b }
	secs := func(n int) *int { return &n }
	tz := func(z string) *v1.ClockOffsetTimezone { c := v1.ClockOffsetTimezone(z); return &c }
	for _, tc := range []struct {
		name   string
		mutate func(*v1.VirtualMachineInstance)
		want   []string // "<error type> <field path>"
	}{
		{name: "utc offset", mutate: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Clock = &v1.Clock{ClockOffset: v1.ClockOffset{UTC: &v1.ClockOffsetUTC{OffsetSeconds: secs(-7200)}}}
		}},
		{name: "timezone", mutate: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Clock = &v1.Clock{ClockOffset: v1.ClockOffset{Timezone: tz("America/New_York")}}
		}},
		{name: "both, bad zone, big offset", mutate: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Clock = &v1.Clock{ClockOffset: v1.ClockOffset{UTC: &v1.ClockOffsetUTC{OffsetSeconds: secs(MaxClockOffsetSeconds + 1)}, Timezone: tz("Mars/Olympus")}}
		}, want: []string{"Invalid value spec.domain.clock", "Invalid value spec.domain.clock.timezone", "Invalid value spec.domain.clock.utc.offsetSeconds"}},
		{name: "Local and empty zone", mutate: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Clock = &v1.Clock{ClockOffset: v1.ClockOffset{Timezone: tz("Local")}}
		}, want: []string{"Invalid value spec.domain.clock.timezone"}},
		{name: "timers QEMU renders", mutate: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Clock = &v1.Clock{Timer: &v1.Timer{
				HPET:   &v1.HPETTimer{Enabled: ptr(false)},
				PIT:    &v1.PITTimer{TickPolicy: v1.PITTickPolicyDiscard, Enabled: ptr(true)},
				RTC:    &v1.RTCTimer{TickPolicy: v1.RTCTickPolicyCatchup, Track: v1.TrackWall},
				KVM:    &v1.KVMTimer{Enabled: ptr(false)},
				Hyperv: &v1.HypervTimer{Enabled: ptr(false)},
			}}
		}},
		{name: "timers refused", mutate: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Clock = &v1.Clock{Timer: &v1.Timer{
				HPET:   &v1.HPETTimer{TickPolicy: v1.HPETTickPolicyMerge},
				PIT:    &v1.PITTimer{TickPolicy: v1.PITTickPolicyCatchup},
				RTC:    &v1.RTCTimer{TickPolicy: "merge", Track: "boot", Enabled: ptr(false)},
				Hyperv: &v1.HypervTimer{},
			}}
		}, want: []string{
			"Invalid value spec.domain.clock.timer.hpet.tickPolicy",
			"Invalid value spec.domain.clock.timer.pit.tickPolicy",
			"Invalid value spec.domain.clock.timer.rtc.present",
			"Unsupported value spec.domain.clock.timer.rtc.tickPolicy",
			"Unsupported value spec.domain.clock.timer.rtc.track",
		}},
		{name: "watchdog defaulted", mutate: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Watchdog = &v1.Watchdog{Name: "wd"}
		}},
		{name: "watchdog bad", mutate: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Watchdog = &v1.Watchdog{Name: "Bad_Name", WatchdogDevice: v1.WatchdogDevice{
				I6300ESB: &v1.I6300ESBWatchdog{Action: "pause"}, Diag288: &v1.Unsupported{RawJSON: v1.RawJSON{Raw: []byte("{}")}}}}
		}, want: []string{
			"Forbidden spec.domain.devices.watchdog.diag288",
			"Invalid value spec.domain.devices.watchdog.name",
			"Unsupported value spec.domain.devices.watchdog.i6300esb.action",
		}},
		{name: "inputs", mutate: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Inputs = []v1.Input{{Name: "a"}, {Name: "b", Bus: v1.InputBusVirtio, Type: v1.InputTypeTablet}}
		}},
		{name: "inputs bad", mutate: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Inputs = []v1.Input{{Name: "a", Type: v1.InputTypeKeyboard}, {Name: "a", Bus: "ps2"}, {Name: ""}}
		}, want: []string{
			"Duplicate value spec.domain.devices.inputs[1].name",
			"Required value spec.domain.devices.inputs[2].name",
			"Unsupported value spec.domain.devices.inputs[0].type",
			"Unsupported value spec.domain.devices.inputs[1].bus",
		}},
		{name: "too many inputs", mutate: func(v *v1.VirtualMachineInstance) {
			for i := range MaxInputs + 1 {
				v.Spec.Domain.Devices.Inputs = append(v.Spec.Domain.Devices.Inputs, v1.Input{Name: "i" + string(rune('a'+i))})
			}
		}, want: []string{"Too many spec.domain.devices.inputs"}},
		{name: "autoattachInputDevice", mutate: func(v *v1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.AutoattachInputDevice = ptr(true)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vmi := baseVMI()
			tc.mutate(vmi)
			v1.SetVirtualMachineInstanceDefaults(vmi)
			errs := ValidateVirtualMachineInstance(vmi)
			got := errorKeys(errs)
			want := append([]string(nil), tc.want...)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("errors\n got %q\nwant %q\n%v", got, want, errs)
			}
		})
	}
}

// KubeVirt's defaults: the watchdog is an i6300esb that resets, an input a
// usb tablet, autoattachInputDevice adds default-0 only when inputs is empty.
func TestDeviceDefaults(t *testing.T) {
	on := true
	vmi := baseVMI()
	vmi.Spec.Domain.Devices.Watchdog = &v1.Watchdog{Name: "wd"}
	vmi.Spec.Domain.Devices.AutoattachInputDevice = &on
	v1.SetVirtualMachineInstanceDefaults(vmi)
	if w := vmi.Spec.Domain.Devices.Watchdog; w.I6300ESB == nil || w.I6300ESB.Action != v1.WatchdogActionReset {
		t.Errorf("watchdog %+v", w)
	}
	if in := vmi.Spec.Domain.Devices.Inputs; len(in) != 1 || in[0] != (v1.Input{Name: v1.DefaultInputName, Bus: v1.InputBusUSB, Type: v1.InputTypeTablet}) {
		t.Errorf("inputs %+v", in)
	}
	vmi = baseVMI()
	vmi.Spec.Domain.Devices.AutoattachInputDevice = &on
	vmi.Spec.Domain.Devices.Inputs = []v1.Input{{Name: "mine", Bus: v1.InputBusVirtio}}
	v1.SetVirtualMachineInstanceDefaults(vmi)
	if in := vmi.Spec.Domain.Devices.Inputs; len(in) != 1 || in[0].Name != "mine" || in[0].Type != v1.InputTypeTablet {
		t.Errorf("inputs %+v", in)
	}
}
