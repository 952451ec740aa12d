package cmdline

import (
	"strings"
	"testing"
	"time"
)

// devicesVMI is a minimal VMI with extra domain YAML (indented under domain).
func devicesVMI(domain string) string {
	return `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: devs}
spec:
  domain:
    memory: {guest: 256Mi}
` + domain + `
    devices:
      autoattachPodInterface: false
      autoattachGraphicsDevice: false
      disks:
      - {name: root, disk: {bus: virtio}}
` + "%DEVICES%" + `
  volumes:
  - {name: root, containerDisk: {image: "oci:x"}}
`
}

func TestBuildClockWatchdogInputs(t *testing.T) {
	now := time.Date(2026, 3, 8, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name, domain, devices string
		accel                 string
		noNow                 bool
		want                  []string // substrings of the joined argv
		not                   []string
		err                   string
	}{
		{name: "no clock", want: []string{"-machine q35,accel=tcg,vmport=off,dump-guest-core=off "}, not: []string{"-rtc", "-action"}},
		{name: "utc", domain: "    clock: {utc: {}}", want: []string{"-rtc base=utc"}},
		{name: "utc offset", domain: "    clock: {utc: {offsetSeconds: -3600}}", want: []string{"-rtc base=2026-03-08T11:00:00"}},
		{name: "timezone", domain: "    clock: {timezone: America/New_York}", want: []string{"-rtc base=2026-03-08T08:00:00"}},
		{name: "timezone needs now", domain: "    clock: {timezone: Europe/Berlin}", noNow: true, err: "Input.Now: required by spec.domain.clock.timezone"},
		{name: "timers tcg", domain: `    clock:
      utc: {}
      timer:
        hpet: {present: false}
        pit: {present: false, tickPolicy: delay}
        rtc: {tickPolicy: catchup, track: guest}
        kvm: {present: false}`,
			want: []string{"hpet=off,pit=off", "-rtc base=utc,clock=vm,driftfix=slew", "-cpu max "},
			not:  []string{"kvm-pit", "kvmclock"}},
		{name: "timers kvm", accel: AccelKVM, domain: `    clock:
      utc: {}
      timer:
        pit: {tickPolicy: discard}
        rtc: {tickPolicy: delay, track: wall}
        kvm: {present: false}
        hyperv: {}`,
			want: []string{"-global driver=kvm-pit,property=lost_tick_policy,value=discard", "-rtc base=utc,clock=host,driftfix=none", "-cpu host,hv-time=on,kvmclock=off"}},
		{name: "hyperv timer under tcg", domain: "    clock: {utc: {}, timer: {hyperv: {}}}",
			err: "spec.domain.clock.timer.hyperv.present: the Hyper-V reference time (hv-time) needs KVM"},
		{name: "pit discard under tcg", domain: "    clock: {utc: {}, timer: {pit: {tickPolicy: discard}}}",
			err: "spec.domain.clock.timer.pit.tickPolicy: discard: only KVM's in-kernel PIT"},
		{name: "kvmclock under tcg", domain: "    clock: {utc: {}, timer: {kvm: {present: true}}}",
			err: "spec.domain.clock.timer.kvm.present: kvmclock needs KVM"},
		{name: "watchdog default reset", devices: "      watchdog: {name: wd}",
			want: []string{"-device i6300esb,id=watchdog0 -action watchdog=reset"}},
		{name: "watchdog poweroff", devices: "      watchdog: {name: wd, i6300esb: {action: poweroff}}",
			want: []string{"-device i6300esb,id=watchdog0 -action watchdog=poweroff"}},
		{name: "watchdog shutdown", devices: "      watchdog: {name: wd, i6300esb: {action: shutdown}}",
			want: []string{"-action watchdog=shutdown"}},
		{name: "inputs", devices: `      inputs:
      - {name: t1, bus: usb, type: tablet}
      - {name: t2, bus: virtio, type: tablet}
      - {name: t3}`,
			want: []string{"-device qemu-xhci,id=usb0 -device usb-tablet,id=input-t1,bus=usb0.0 -device virtio-tablet-pci,id=input-t2 -device usb-tablet,id=input-t3,bus=usb0.0"}},
		{name: "autoattachInputDevice", devices: "      autoattachInputDevice: true",
			want: []string{"-device qemu-xhci,id=usb0 -device usb-tablet,id=input-default-0,bus=usb0.0"}},
		{name: "autoattachInputDevice false", devices: "      autoattachInputDevice: false", not: []string{"tablet", "xhci"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newGoldenEnv()
			accel := tc.accel
			if accel == "" {
				accel = AccelTCG
			}
			y := strings.Replace(devicesVMI(tc.domain), "%DEVICES%", tc.devices, 1)
			in := Input{VMI: mustVMI(t, y), Facts: e.facts(accel), Paths: e.paths(), Drives: map[string]Drive{
				"root": {Path: "/run/kemu/root.qcow2", Format: FormatQCOW2}}}
			if !tc.noNow {
				in.Now = now
			}
			argv, err := Build(in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			joined := strings.Join(argv, " ") + " "
			for _, w := range tc.want {
				if !strings.Contains(joined, w) {
					t.Errorf("argv lacks %q:\n%s", w, joined)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(joined, n) {
					t.Errorf("argv has %q:\n%s", n, joined)
				}
			}
		})
	}
}
