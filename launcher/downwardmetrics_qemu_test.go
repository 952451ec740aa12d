//go:build qemu

package launcher

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kemu-dev/kemu/launcher/cmdline"
	"github.com/kemu-dev/kemu/launcher/downwardmetrics"
	"github.com/kemu-dev/kemu/test/testguest"
)

// readMetrics reads the vhostmd disk as the guest's vm-dump-metrics would,
// again while it is busy, into a map of "<context>/<name>" to value.
func readMetrics(t *testing.T, path string) map[string]string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		m, err := downwardmetrics.Read(f)
		f.Close()
		if err == nil {
			out := map[string]string{}
			for _, x := range m.Metrics {
				out[x.Context+"/"+x.Name] = x.Value
			}
			return out
		}
		if !errors.Is(err, downwardmetrics.ErrBusy) || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The downwardMetrics volume is a 256 KiB read-only virtio disk in the
// guest; on the host its metrics (the node's name as HostName, this VM's
// vCPUs and memory) parse, and they are refreshed while the VM runs. The
// launcher is connected to the org.github.vhostmd.1 port's chardev (the
// test guest has no vm-dump-metrics to ask it: the protocol is
// downwardmetrics.TestServe*'s).
func TestDownwardMetrics(t *testing.T) {
	vmi := parseVMI(t, `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: dm}
spec:
  domain:
    memory: {guest: 192Mi}
    firmware:
      kernelBoot:
        kernelArgs: console=ttyS0 quiet kemu.dhcp=0 kemu.agent=0
        container: {image: "oci:_out/testguest/oci/kernelboot", kernelPath: /boot/vmlinuz, initrdPath: /boot/initrd.img}
    devices:
      autoattachPodInterface: false
      downwardMetrics: {}
      disks:
      - {name: metrics, serial: metrics}
  volumes:
  - {name: metrics, downwardMetrics: {}}
`)
	cfg := newConfig(t, vmi)
	cfg.NodeName = "node-under-test"
	v := start(t, cfg)
	blk := v.wait(bootTimeout, testguest.IsKind(testguest.KindBlock, "serial", "metrics"))
	if blk.Field("size") != strconv.Itoa(downwardmetrics.DiskSize) || blk.Field("ro") != "1" || blk.Field("bus") != "virtio" {
		t.Errorf("guest disk: %s", blk.Raw)
	}
	v.wait(bootTimeout, testguest.IsKind(testguest.KindReady))
	if got := chardevFilename(t, v, cmdline.ChardevDownwardMetrics); strings.HasPrefix(got, "disconnected:") || got == "" {
		t.Errorf("downward metrics chardev %q: the launcher is not connected", got)
	}

	path := v.l.downwardMetricsDisk()
	first := readMetrics(t, path)
	for k, want := range map[string]string{
		"host/HostName": "node-under-test", "host/VirtualizationVendor": downwardmetrics.VirtualizationVendor,
		"vm/ResourceProcessorLimit": "1", "vm/PhysicalMemoryAllocatedToVirtualSystem": strconv.Itoa(192 << 10),
		"vm/ResourceMemoryLimit": strconv.Itoa(192 << 10),
	} {
		if first[k] != want {
			t.Errorf("%s = %q, want %q (all: %v)", k, first[k], want, first)
		}
	}
	if len(first) != 17 {
		t.Errorf("%d metrics, want 17: %v", len(first), first)
	}
	// The next refresh has a later Time and the guest's boot has used CPU.
	time.Sleep(DownwardMetricsPeriod + time.Second)
	second := readMetrics(t, path)
	t1, _ := strconv.ParseInt(first["host/Time"], 10, 64)
	t2, _ := strconv.ParseInt(second["host/Time"], 10, 64)
	if t2 <= t1 {
		t.Errorf("Time %d then %d: not refreshed", t1, t2)
	}
	if cpu, _ := strconv.ParseFloat(second["vm/TotalCPUTime"], 64); cpu <= 0 {
		t.Errorf("vm TotalCPUTime %q", second["vm/TotalCPUTime"])
	}
}

// chardevFilename is QEMU's name for a chardev's connection
// ("disconnected:..." while no client is connected).
func chardevFilename(t *testing.T, v *vm, label string) string {
	t.Helper()
	var chardevs []struct {
		Label    string `json:"label"`
		Filename string `json:"filename"`
	}
	if err := v.l.mon.Execute(ctxFor(t, stepTimeout), "query-chardev", nil, &chardevs); err != nil {
		t.Fatal(err)
	}
	for _, c := range chardevs {
		if c.Label == label {
			return c.Filename
		}
	}
	return ""
}
