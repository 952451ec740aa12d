package validation

import (
	"fmt"
	"time"
	// The zone names of spec.domain.clock.timezone are checked against Go's
	// embedded IANA database, the same in every component and image.
	_ "time/tzdata"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// MaxClockOffsetSeconds bounds spec.domain.clock.utc.offsetSeconds (±50
// years): QEMU's -rtc base is a date, and a guest clock decades away is a
// mistake, not a setting.
const MaxClockOffsetSeconds = 50 * 365 * 24 * 3600

// MaxInputs bounds spec.domain.devices.inputs (also the CRD's maxItems).
const MaxInputs = 16

// maxTimezoneLength bounds a zone name (IANA names are far shorter).
const maxTimezoneLength = 64

// validateClock checks spec.domain.clock: at most one of utc and timezone,
// a bounded offset, a zone Go's IANA database knows, and the timer settings
// QEMU can render whatever the accelerator (the accelerator-dependent ones
// are refused by launcher/cmdline at launch).
func validateClock(c *v1.Clock, p *field.Path) field.ErrorList {
	if c == nil {
		return nil
	}
	var errs field.ErrorList
	if c.UTC != nil && c.Timezone != nil {
		errs = append(errs, field.Invalid(p, "utc and timezone", "set only one of utc and timezone"))
	}
	if c.UTC != nil && c.UTC.OffsetSeconds != nil {
		if o := *c.UTC.OffsetSeconds; o > MaxClockOffsetSeconds || o < -MaxClockOffsetSeconds {
			errs = append(errs, field.Invalid(p.Child("utc", "offsetSeconds"), o,
				fmt.Sprintf("must be between -%d and %d (50 years)", MaxClockOffsetSeconds, MaxClockOffsetSeconds)))
		}
	}
	if c.Timezone != nil {
		errs = append(errs, validTimezone(p.Child("timezone"), string(*c.Timezone))...)
	}
	if t := c.Timer; t != nil {
		tp := p.Child("timer")
		if h := t.HPET; h != nil && h.TickPolicy != "" {
			hp := tp.Child("hpet", "tickPolicy")
			if e := oneOf(hp, string(h.TickPolicy), string(v1.HPETTickPolicyDelay), string(v1.HPETTickPolicyCatchup),
				string(v1.HPETTickPolicyMerge), string(v1.HPETTickPolicyDiscard)); e != nil {
				errs = append(errs, e...)
			} else {
				errs = append(errs, field.Invalid(hp, h.TickPolicy, "QEMU's HPET has no lost-tick policy (libvirt refuses it too); leave it unset"))
			}
		}
		if pit := t.PIT; pit != nil && pit.TickPolicy != "" {
			pp := tp.Child("pit", "tickPolicy")
			if e := oneOf(pp, string(pit.TickPolicy), string(v1.PITTickPolicyDelay), string(v1.PITTickPolicyCatchup), string(v1.PITTickPolicyDiscard)); e != nil {
				errs = append(errs, e...)
			} else if pit.TickPolicy == v1.PITTickPolicyCatchup {
				errs = append(errs, field.Invalid(pp, pit.TickPolicy,
					"QEMU's in-kernel PIT (kvm-pit) supports delay and discard only; TCG's PIT none (refused at launch)"))
			}
		}
		if r := t.RTC; r != nil {
			rp := tp.Child("rtc")
			if r.TickPolicy != "" {
				errs = append(errs, oneOf(rp.Child("tickPolicy"), string(r.TickPolicy), string(v1.RTCTickPolicyDelay), string(v1.RTCTickPolicyCatchup))...)
			}
			if r.Track != "" {
				errs = append(errs, oneOf(rp.Child("track"), string(r.Track), string(v1.TrackGuest), string(v1.TrackWall))...)
			}
			if r.Enabled != nil && !*r.Enabled {
				errs = append(errs, field.Invalid(rp.Child("present"), false, "a PC's RTC (mc146818) cannot be removed"))
			}
		}
	}
	return errs
}

func validTimezone(p *field.Path, zone string) field.ErrorList {
	switch {
	case zone == "":
		return field.ErrorList{field.Required(p, "an IANA time zone name, e.g. America/New_York")}
	case len(zone) > maxTimezoneLength:
		return field.ErrorList{field.TooLong(p, zone, maxTimezoneLength)}
	case zone == "Local":
		return field.ErrorList{field.Invalid(p, zone, "Local is the host's zone, not a zone name")}
	}
	if _, err := time.LoadLocation(zone); err != nil {
		return field.ErrorList{field.Invalid(p, zone, "not an IANA time zone name (e.g. America/New_York)")}
	}
	return nil
}

// validateWatchdog checks spec.domain.devices.watchdog: a name and an
// i6300esb (diag288 is refused as unsupported by the walker) with
// KubeVirt's actions.
func validateWatchdog(w *v1.Watchdog, p *field.Path) field.ErrorList {
	if w == nil {
		return nil
	}
	var errs field.ErrorList
	errs = append(errs, dnsLabel(p.Child("name"), w.Name)...)
	if w.I6300ESB == nil && w.Diag288 == nil {
		errs = append(errs, field.Required(p.Child("i6300esb"), "defaulting sets it"))
	}
	if e := w.I6300ESB; e != nil {
		errs = append(errs, oneOf(p.Child("i6300esb", "action"), string(e.Action),
			string(v1.WatchdogActionPoweroff), string(v1.WatchdogActionReset), string(v1.WatchdogActionShutdown))...)
	}
	return errs
}

// validateInputs checks spec.domain.devices.inputs: at most MaxInputs,
// unique DNS-label names (they name QEMU devices), bus usb or virtio, type
// tablet (KubeVirt's rules).
func validateInputs(ins []v1.Input, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(ins) > MaxInputs {
		errs = append(errs, field.TooMany(p, len(ins), MaxInputs))
		return errs
	}
	seen := sets.New[string]()
	for i, in := range ins {
		ip := p.Index(i)
		errs = append(errs, dnsLabel(ip.Child("name"), in.Name)...)
		if seen.Has(in.Name) {
			errs = append(errs, field.Duplicate(ip.Child("name"), in.Name))
		}
		seen.Insert(in.Name)
		errs = append(errs, oneOf(ip.Child("bus"), string(in.Bus), string(v1.InputBusUSB), string(v1.InputBusVirtio))...)
		errs = append(errs, oneOf(ip.Child("type"), string(in.Type), string(v1.InputTypeTablet))...)
	}
	return errs
}

// devicePCISlots counts the PCI devices of the watchdog and the inputs:
// the i6300esb, one virtio-tablet-pci per virtio input, one qemu-xhci
// controller for the usb ones.
func devicePCISlots(d *v1.Devices) int {
	n := 0
	if d.Watchdog != nil {
		n++
	}
	usb := false
	for _, in := range d.Inputs {
		switch in.Bus {
		case v1.InputBusVirtio:
			n++
		default:
			usb = true
		}
	}
	if usb {
		n++
	}
	return n
}
