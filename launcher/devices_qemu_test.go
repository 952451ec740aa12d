//go:build qemu

package launcher

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
)

const devicesVMI = `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: devices}
spec:
  domain:
    memory: {guest: 256Mi}
    clock:
      utc: {offsetSeconds: 262800}
      timer:
        rtc: {tickPolicy: catchup}
        hpet: {present: false}
    devices:
      autoattachPodInterface: false
      autoattachGraphicsDevice: false
      watchdog: {name: wd, i6300esb: {action: reset}}
      inputs:
      - {name: usbtab, bus: usb, type: tablet}
      - {name: virtiotab, bus: virtio, type: tablet}
      disks:
      - {name: root, disk: {bus: virtio}}
  volumes:
  - {name: root, containerDisk: {image: "oci:_out/testguest/oci/containerdisk"}}
`

// guestOut runs cmd in the guest through its agent and returns its stdout.
func guestOut(t *testing.T, ctx context.Context, l *Launcher, cmd string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	r, err := l.Exec(ctx, cmd, &out, &errOut)
	if err != nil || !r.OK() {
		t.Fatalf("guest %q: %v %+v, stderr %q", cmd, err, r, errOut.String())
	}
	return out.String()
}

// What the test guest sees of spec.domain.clock, the inputs and the
// watchdog, in one boot: its RTC 262800 s ahead of the host's clock, a USB
// and a virtio tablet in /proc/bus/input/devices, the i6300esb (PCI
// 8086:25ab) and /dev/watchdog; then the guest opens the watchdog and stops
// petting it, QEMU resets the guest (action reset), and the launcher's
// domain says so while the guest boots again.
func TestClockInputsWatchdog(t *testing.T) {
	v := start(t, newConfig(t, parseVMI(t, devicesVMI)))
	ctx := ctxFor(t, 10*time.Minute)
	pollPing(t, ctx, v.l, 3*bootTimeout, "after boot")
	t0 := time.Now()

	rtc := strings.TrimSpace(guestOut(t, ctx, v.l, "cat /sys/class/rtc/rtc0/since_epoch"))
	secs, err := strconv.ParseInt(rtc, 10, 64)
	if err != nil {
		t.Fatalf("guest RTC %q: %v", rtc, err)
	}
	if d := secs - time.Now().Unix() - 262800; d < -120 || d > 120 {
		t.Errorf("guest RTC %d is %d s off the host's clock + 262800 s", secs, d)
	}

	inputs := guestOut(t, ctx, v.l, "cat /proc/bus/input/devices")
	for _, name := range []string{"QEMU USB Tablet", "Virtio Tablet"} {
		if !strings.Contains(inputs, name) {
			t.Errorf("/proc/bus/input/devices has no %q:\n%s", name, inputs)
		}
	}
	pci := guestOut(t, ctx, v.l, "cat /sys/bus/pci/devices/*/vendor /sys/bus/pci/devices/*/device | tr '\\n' ' '; ls /dev/watchdog")
	if !strings.Contains(pci, "0x25ab") || !strings.Contains(pci, "/dev/watchdog") {
		t.Errorf("no i6300esb (8086:25ab) or /dev/watchdog in the guest: %q", pci)
	}
	t.Logf("guest facts read in %s", time.Since(t0))

	// Open the watchdog and close it without the magic 'V': it runs on,
	// unpetted (i6300esb's heartbeat is 30 s).
	t1 := time.Now()
	guestOut(t, ctx, v.l, "echo 1 > /dev/watchdog")
	d, err := v.l.Watch(false).WaitFor(ctxFor(t, 4*time.Minute), func(d Domain) bool {
		return d.Message == WatchdogMessage("reset")
	})
	if err != nil {
		t.Fatalf("waiting for the watchdog: %v (domain %s)", err, v.l.Domain())
	}
	if d.State != StateRunning {
		t.Errorf("after the watchdog's reset: domain %s, want Running", d)
	}
	t.Logf("watchdog fired %s after the guest stopped petting it", time.Since(t1))
	// The reset guest boots again: its agent answers with a fresh uptime.
	pollPing(t, ctx, v.l, 3*bootTimeout, "after the watchdog's reset")
	up := strings.Fields(guestOut(t, ctx, v.l, "cat /proc/uptime"))
	if len(up) == 0 {
		t.Fatal("no uptime")
	}
	if u, err := strconv.ParseFloat(up[0], 64); err != nil || u > time.Since(t1).Seconds() {
		t.Errorf("guest uptime %q: it did not reboot after the watchdog fired %s ago", up[0], time.Since(t1))
	}
}

const poweroffVMI = `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: wdpoweroff}
spec:
  domain:
    memory: {guest: 256Mi}
    clock: {timezone: Asia/Kathmandu}
    devices:
      autoattachPodInterface: false
      autoattachGraphicsDevice: false
      autoattachInputDevice: true
      watchdog: {name: wd, i6300esb: {action: poweroff}}
      disks:
      - {name: root, disk: {bus: virtio}}
  volumes:
  - {name: root, containerDisk: {image: "oci:_out/testguest/oci/containerdisk"}}
`

// A time zone's offset in the guest's RTC (Asia/Kathmandu: UTC+5:45, no
// daylight saving), autoattachInputDevice's usb tablet, and the watchdog's
// poweroff: QEMU ends, and the domain ends Crashed with the watchdog's
// message (the node agent's Failed VMI and its Warning event carry it).
func TestTimezoneWatchdogPoweroff(t *testing.T) {
	v := start(t, newConfig(t, parseVMI(t, poweroffVMI)))
	ctx := ctxFor(t, 8*time.Minute)
	pollPing(t, ctx, v.l, 3*bootTimeout, "after boot")

	rtc := strings.TrimSpace(guestOut(t, ctx, v.l, "cat /sys/class/rtc/rtc0/since_epoch"))
	secs, err := strconv.ParseInt(rtc, 10, 64)
	if err != nil {
		t.Fatalf("guest RTC %q: %v", rtc, err)
	}
	const kathmandu = 5*3600 + 45*60
	if d := secs - time.Now().Unix() - kathmandu; d < -120 || d > 120 {
		t.Errorf("guest RTC %d is %d s off the host's clock + %d s (Asia/Kathmandu)", secs, d, kathmandu)
	}
	if inputs := guestOut(t, ctx, v.l, "cat /proc/bus/input/devices"); !strings.Contains(inputs, "QEMU USB Tablet") {
		t.Errorf("autoattachInputDevice: no USB tablet in /proc/bus/input/devices:\n%s", inputs)
	}

	t1 := time.Now()
	guestOut(t, ctx, v.l, "echo 1 > /dev/watchdog")
	d, err := v.l.Watch(false).WaitFor(ctxFor(t, 4*time.Minute), func(d Domain) bool { return d.State == StateShutoff })
	if err != nil {
		t.Fatalf("waiting for the watchdog's poweroff: %v (domain %s)", err, v.l.Domain())
	}
	if d.Reason != ReasonCrashed || !strings.HasPrefix(d.Message, WatchdogMessage("poweroff")) {
		t.Errorf("after the watchdog's poweroff: domain %s (reason %s, message %q)", d, d.Reason, d.Message)
	}
	t.Logf("watchdog powered the VM off %s after the guest stopped petting it", time.Since(t1))
}
