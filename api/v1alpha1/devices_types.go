package v1alpha1

// Clock, watchdog and input devices (issue #23), KubeVirt's types and names.

// ClockOffset is where the guest's RTC starts. Exactly one of its members
// must be set.
type ClockOffset struct {
	// UTC starts the guest's RTC at UTC, plus offsetSeconds.
	// +optional
	UTC *ClockOffsetUTC `json:"utc,omitempty"`
	// Timezone starts the guest's RTC at the wall time of this zone (an IANA
	// name such as America/New_York), the zone's offset at the VM's start.
	// +optional
	Timezone *ClockOffsetTimezone `json:"timezone,omitempty"`
}

// ClockOffsetUTC starts the guest's RTC at UTC plus OffsetSeconds.
type ClockOffsetUTC struct {
	// OffsetSeconds is added to UTC (at most ±10 years).
	// +optional
	OffsetSeconds *int `json:"offsetSeconds,omitempty"`
}

// ClockOffsetTimezone is an IANA time zone name, e.g. America/New_York.
type ClockOffsetTimezone string

// Clock is the guest's RTC start and its timers.
type Clock struct {
	ClockOffset `json:",inline"`
	// Timer says which timers the guest has and how their lost ticks are
	// handled.
	// +optional
	Timer *Timer `json:"timer,omitempty"`
}

// Timer holds the timers' settings.
type Timer struct {
	// HPET, the High Precision Event Timer.
	// +optional
	HPET *HPETTimer `json:"hpet,omitempty"`
	// KVM, the paravirtual kvmclock (KVM only).
	// +optional
	KVM *KVMTimer `json:"kvm,omitempty"`
	// PIT, the i8254 Programmable Interval Timer.
	// +optional
	PIT *PITTimer `json:"pit,omitempty"`
	// RTC, the MC146818 Real Time Clock.
	// +optional
	RTC *RTCTimer `json:"rtc,omitempty"`
	// Hyperv, the Hyper-V reference time (hv-time).
	// +optional
	Hyperv *HypervTimer `json:"hyperv,omitempty"`
}

// HPETTickPolicy is what happens to the HPET's lost ticks.
type HPETTickPolicy string

// PITTickPolicy is what happens to the PIT's lost ticks.
type PITTickPolicy string

// RTCTickPolicy is what happens to the RTC's lost ticks.
type RTCTickPolicy string

// Tick policies (KubeVirt's).
const (
	HPETTickPolicyDelay   HPETTickPolicy = "delay"
	HPETTickPolicyCatchup HPETTickPolicy = "catchup"
	HPETTickPolicyMerge   HPETTickPolicy = "merge"
	HPETTickPolicyDiscard HPETTickPolicy = "discard"

	PITTickPolicyDelay   PITTickPolicy = "delay"
	PITTickPolicyCatchup PITTickPolicy = "catchup"
	PITTickPolicyDiscard PITTickPolicy = "discard"

	RTCTickPolicyDelay   RTCTickPolicy = "delay"
	RTCTickPolicyCatchup RTCTickPolicy = "catchup"
)

// RTCTimerTrack is the clock the RTC follows.
type RTCTimerTrack string

// RTC tracks.
const (
	TrackGuest RTCTimerTrack = "guest"
	TrackWall  RTCTimerTrack = "wall"
)

// RTCTimer is the RTC's settings.
type RTCTimer struct {
	// TickPolicy: delay or catchup.
	// +optional
	TickPolicy RTCTickPolicy `json:"tickPolicy,omitempty"`
	// Enabled (JSON present) false removes the timer (default true).
	// +optional
	Enabled *bool `json:"present,omitempty"`
	// Track: guest (the RTC stops with the VM) or wall (the host's clock).
	// +optional
	Track RTCTimerTrack `json:"track,omitempty"`
}

// HPETTimer is the HPET's settings.
type HPETTimer struct {
	// TickPolicy: delay, catchup, merge or discard.
	// +optional
	TickPolicy HPETTickPolicy `json:"tickPolicy,omitempty"`
	// Enabled (JSON present) false removes the timer (default true).
	// +optional
	Enabled *bool `json:"present,omitempty"`
}

// PITTimer is the PIT's settings.
type PITTimer struct {
	// TickPolicy: delay, catchup or discard.
	// +optional
	TickPolicy PITTickPolicy `json:"tickPolicy,omitempty"`
	// Enabled (JSON present) false removes the timer (default true).
	// +optional
	Enabled *bool `json:"present,omitempty"`
}

// KVMTimer is kvmclock's settings.
type KVMTimer struct {
	// Enabled (JSON present) false removes the timer (default true).
	// +optional
	Enabled *bool `json:"present,omitempty"`
}

// HypervTimer is the Hyper-V reference time's settings.
type HypervTimer struct {
	// Enabled (JSON present) false removes the timer (default true).
	// +optional
	Enabled *bool `json:"present,omitempty"`
}

// WatchdogAction is what happens when the guest stops petting its watchdog.
type WatchdogAction string

// Watchdog actions (KubeVirt's).
const (
	// WatchdogActionPoweroff: the VM is powered off at once.
	WatchdogActionPoweroff WatchdogAction = "poweroff"
	// WatchdogActionReset: the VM is reset.
	WatchdogActionReset WatchdogAction = "reset"
	// WatchdogActionShutdown: the guest is asked to shut down (ACPI power button).
	WatchdogActionShutdown WatchdogAction = "shutdown"
)

// Watchdog is a named watchdog device.
type Watchdog struct {
	// Name of the watchdog.
	Name           string `json:"name"`
	WatchdogDevice `json:",inline"`
}

// WatchdogDevice is the watchdog's model; exactly one member is set
// (defaults to i6300esb).
type WatchdogDevice struct {
	// I6300ESB is Intel's 6300ESB PCI watchdog.
	// +optional
	I6300ESB *I6300ESBWatchdog `json:"i6300esb,omitempty"`
	// Diag288 is s390x's watchdog; refused (kemu runs x86_64).
	// +optional
	Diag288 *Unsupported `json:"diag288,omitempty"`
}

// I6300ESBWatchdog is the i6300esb's action.
type I6300ESBWatchdog struct {
	// Action: poweroff, reset (default) or shutdown.
	// +optional
	Action WatchdogAction `json:"action,omitempty"`
}

// InputBus is an input device's bus.
type InputBus string

// Input buses.
const (
	InputBusUSB    InputBus = "usb"
	InputBusVirtio InputBus = "virtio"
)

// InputType is an input device's type.
type InputType string

// Input types; KubeVirt supports the tablet only.
const (
	InputTypeTablet   InputType = "tablet"
	InputTypeKeyboard InputType = "keyboard"
)

// Input is an input device.
type Input struct {
	// Bus: usb (default) or virtio.
	// +optional
	Bus InputBus `json:"bus,omitempty"`
	// Type: tablet (default; the only one supported).
	// +optional
	Type InputType `json:"type,omitempty"`
	// Name is the device's name.
	Name string `json:"name"`
}

// DefaultInputName names the input device added by autoattachInputDevice.
const DefaultInputName = "default-0"
