package cmdline

import (
	"fmt"
	"time"
	// spec.domain.clock.timezone is resolved with Go's embedded IANA
	// database: the launcher image has no /usr/share/zoneinfo.
	_ "time/tzdata"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// Fixed ids of the clock, watchdog and input devices.
const (
	WatchdogID      = "watchdog0"
	USBControllerID = "usb0"
)

// InputID is the QEMU device id of the input named name.
func InputID(name string) string { return "input-" + name }

// RTCBaseFormat is -rtc base's date format (QEMU's, no zone: the guest's
// RTC holds wall time).
const RTCBaseFormat = "2006-01-02T15:04:05"

// RTC is -rtc: the RTC's start (Base: "utc" or a date), which clock it
// follows (Clock: host or vm; "" = QEMU's default) and its lost-tick policy
// (DriftFix: slew or none).
type RTC struct{ Base, Clock, DriftFix string }

// Args implements Device.
func (r RTC) Args() ([]string, error) {
	if r.Base == "" {
		return nil, fmt.Errorf("-rtc: no base")
	}
	return newOpts("").add("base", r.Base).addNonEmpty("clock", r.Clock).addNonEmpty("driftfix", r.DriftFix).arg("-rtc")
}

// Watchdog is an i6300esb watchdog and QEMU's action when it fires
// (-action watchdog=reset|poweroff|shutdown; shutdown is QEMU's ACPI
// power-button request, as libvirt's).
type Watchdog struct{ ID, Action string }

// Args implements Device.
func (w Watchdog) Args() ([]string, error) {
	switch w.Action {
	case string(v1.WatchdogActionReset), string(v1.WatchdogActionPoweroff), string(v1.WatchdogActionShutdown):
	default:
		return nil, fmt.Errorf("-action: watchdog action %q", w.Action)
	}
	dev, err := newOpts("i6300esb").add("id", w.ID).arg("-device")
	if err != nil {
		return nil, err
	}
	return append(dev, "-action", "watchdog="+w.Action), nil
}

// USBController is the qemu-xhci controller of usb inputs.
type USBController struct{ ID string }

// Args implements Device.
func (u USBController) Args() ([]string, error) {
	return newOpts("qemu-xhci").add("id", u.ID).arg("-device")
}

// Tablet is a tablet (absolute pointer): usb-tablet on Bus (a USB
// controller's bus, e.g. usb0.0), or virtio-tablet-pci when Virtio.
type Tablet struct {
	ID     string
	Virtio bool
	Bus    string
}

// Args implements Device.
func (t Tablet) Args() ([]string, error) {
	if t.Virtio {
		return newOpts("virtio-tablet-pci").add("id", t.ID).arg("-device")
	}
	if t.Bus == "" {
		return nil, fmt.Errorf("-device usb-tablet: no bus")
	}
	return newOpts("usb-tablet").add("id", t.ID).add("bus", t.Bus).arg("-device")
}

// timers is what spec.domain.clock.timer changes on -machine and -cpu.
type timers struct {
	hpetOff, pitOff, kvmclockOff bool
	hvTime                       bool // hv-time: the Hyper-V reference time (KVM only)
}

// planTimers reads spec.domain.clock.timer before -machine and -cpu are
// rendered; what this accelerator cannot do is refused naming the field.
func (b *builder) planTimers() {
	c := b.vmi.Spec.Domain.Clock
	if c == nil || c.Timer == nil {
		return
	}
	t := c.Timer
	const p = "spec.domain.clock.timer"
	tcg := b.in.Facts.Accel == AccelTCG
	if h := t.HPET; h != nil && h.Enabled != nil && !*h.Enabled {
		b.timers.hpetOff = true
	}
	if pit := t.PIT; pit != nil {
		if pit.Enabled != nil && !*pit.Enabled {
			b.timers.pitOff = true
		}
		if tcg && pit.TickPolicy != "" && pit.TickPolicy != v1.PITTickPolicyDelay {
			b.fail(p+".pit.tickPolicy", "%s: only KVM's in-kernel PIT (kvm-pit) has a lost-tick policy; under TCG the PIT delays", pit.TickPolicy)
		}
	}
	if h := t.Hyperv; h != nil && (h.Enabled == nil || *h.Enabled) {
		if tcg {
			b.fail(p+".hyperv.present", "the Hyper-V reference time (hv-time) needs KVM; this node runs the guest under TCG (set present: false or leave hyperv out)")
		} else {
			b.timers.hvTime = true
		}
	}
	if k := t.KVM; k != nil {
		switch on := k.Enabled == nil || *k.Enabled; {
		case on && tcg:
			b.fail(p+".kvm.present", "kvmclock needs KVM; this node runs the guest under TCG (set present: false or leave kvm out)")
		case !on && !tcg:
			b.timers.kvmclockOff = true
		}
	}
}

// clock: -rtc from spec.domain.clock (nothing when unset: QEMU's RTC starts
// at UTC), the PIT's lost-tick policy under KVM.
func (b *builder) clock() {
	c := b.vmi.Spec.Domain.Clock
	if c == nil {
		return
	}
	const p = "spec.domain.clock"
	rtc := RTC{Base: "utc"}
	switch {
	case c.Timezone != nil:
		loc, err := time.LoadLocation(string(*c.Timezone))
		if err != nil {
			b.fail(p+".timezone", "%q: %v", string(*c.Timezone), err)
			return
		}
		if b.in.Now.IsZero() {
			b.fail("Input.Now", "required by %s.timezone", p)
			return
		}
		rtc.Base = b.in.Now.In(loc).Format(RTCBaseFormat)
	case c.UTC != nil && c.UTC.OffsetSeconds != nil && *c.UTC.OffsetSeconds != 0:
		if b.in.Now.IsZero() {
			b.fail("Input.Now", "required by %s.utc.offsetSeconds", p)
			return
		}
		rtc.Base = b.in.Now.UTC().Add(time.Duration(*c.UTC.OffsetSeconds) * time.Second).Format(RTCBaseFormat)
	}
	if t := c.Timer; t != nil {
		if r := t.RTC; r != nil {
			switch r.Track {
			case v1.TrackGuest:
				rtc.Clock = "vm"
			case v1.TrackWall:
				rtc.Clock = "host"
			}
			switch r.TickPolicy {
			case v1.RTCTickPolicyCatchup:
				rtc.DriftFix = "slew"
			case v1.RTCTickPolicyDelay:
				rtc.DriftFix = "none"
			}
		}
		if pit := t.PIT; pit != nil && b.in.Facts.Accel == AccelKVM {
			switch pit.TickPolicy {
			case v1.PITTickPolicyDelay, v1.PITTickPolicyDiscard:
				b.add(p+".timer.pit.tickPolicy", Global{Driver: "kvm-pit", Property: "lost_tick_policy", Value: string(pit.TickPolicy)})
			}
		}
	}
	b.add(p, rtc)
}

// watchdogAndInputs: the i6300esb with its action; the tablets, usb ones
// behind one qemu-xhci controller.
func (b *builder) watchdogAndInputs() {
	devs := &b.vmi.Spec.Domain.Devices
	if w := devs.Watchdog; w != nil {
		const p = "spec.domain.devices.watchdog"
		if w.I6300ESB == nil {
			b.fail(p+".i6300esb", "not set; Build needs a defaulted VMI (diag288 is s390x's)")
			return
		}
		b.claimID(WatchdogID, p)
		b.add(p, Watchdog{ID: WatchdogID, Action: string(w.I6300ESB.Action)})
	}
	usb := false
	for i, in := range devs.Inputs {
		p := fmt.Sprintf("spec.domain.devices.inputs[%d]", i)
		if in.Type != v1.InputTypeTablet {
			b.fail(p+".type", "%q: only tablet is supported", in.Type)
			return
		}
		id := b.val(p+".name", InputID(in.Name))
		b.claimID(id, p+".name")
		switch in.Bus {
		case v1.InputBusVirtio:
			b.add(p, Tablet{ID: id, Virtio: true})
		case v1.InputBusUSB:
			if !usb {
				usb = true
				b.claimID(USBControllerID, p+".bus")
				b.add(p+".bus", USBController{ID: USBControllerID})
			}
			b.add(p, Tablet{ID: id, Bus: USBControllerID + ".0"})
		default:
			b.fail(p+".bus", "%q: must be usb or virtio", in.Bus)
			return
		}
	}
}
