//go:build cluster && qemu

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// workUserData: httpd serving a 64 KiB file, and a loop that burns CPU and
// writes 1 MiB to the emptyDisk (found by its serial) with O_DIRECT every
// second, so the VMI's CPU, network and storage counters move.
const workUserData = `#!/bin/sh
mkdir -p /tmp/www
head -c 65536 /dev/zero >/tmp/www/blob
httpd -p 8080 -h /tmp/www
for d in /sys/block/vd*; do [ "$(cat $d/serial 2>/dev/null)" = scratch-obs ] && scratch=/dev/${d##*/}; done
( while :; do
  dd if=/dev/zero of=$scratch bs=64k count=16 oflag=direct conv=fsync 2>/dev/null
  i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done
  sleep 1
done ) &
echo "KEMU-E2E working disk=$scratch" >/dev/console
`

// TestObservability: a VMI whose guest computes, writes its disk and serves
// HTTP shows rising kemu_vmi_* counters on its node agent's /metrics, which
// passes promtool check metrics; killed QEMU → the VMI fails and a Crashed
// event says why; deleted → its series disappear.
func TestObservability(t *testing.T) {
	ev := need(t)
	dumpOnFailure(t, ev)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	const name = "obs"
	t.Cleanup(func() { ev.c.Kubectl("-n", ns, "delete", "vmi", name, "--ignore-not-found", "--timeout=3m") }) //nolint:errcheck // best effort
	ev.apply(t, vmiManifest(vmiOptions{name: name, userData: workUserData, ports: []int{8080}, emptyDisk: "scratch-obs",
		labels: map[string]string{"kemu-e2e": name}}))
	vmi := ev.waitRunning(ctx, t, name, bootTimeout)
	node := vmi.Status.NodeName
	ev.waitCondition(ctx, t, name, v1.VirtualMachineInstanceAgentConnected, corev1.ConditionTrue, bootTimeout)
	ip := ""
	if err := poll(ctx, 500*time.Millisecond, func() error {
		v, err := ev.getVMI(ctx, name)
		if err != nil || v == nil || len(v.Status.Interfaces) == 0 || v.Status.Interfaces[0].IPAddress == "" {
			return fmt.Errorf("no interface IP yet (%v)", err)
		}
		ip = v.Status.Interfaces[0].IPAddress
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"namespace": ns, "name": name, "node": node}

	t.Run("metrics rise", func(t *testing.T) {
		// The guest's httpd answers (the user data ran).
		const fetches = 8
		fetch := func() error {
			for i := 0; i < fetches; i++ {
				if err := httpGetSize(ctx, fmt.Sprintf("http://%s:8080/blob", ip), 65536); err != nil {
					return err
				}
			}
			return nil
		}
		if err := poll(ctx, time.Second, fetch); err != nil {
			t.Fatal(err)
		}
		first, raw, err := ev.vmiSamples(ctx, node, labels)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("first scrape: %d series of %s (%d bytes in all)", len(first), name, len(raw))
		for _, m := range []string{"kemu_vmi_cpu_usage_seconds_total", "kemu_vmi_vcpu_seconds_total",
			"kemu_vmi_memory_resident_bytes", "kemu_vmi_storage_write_traffic_bytes_total",
			"kemu_vmi_storage_iops_write_total", "kemu_vmi_network_transmit_bytes_total",
			"kemu_vmi_network_receive_bytes_total", "kemu_vmi_info"} {
			if _, ok := first[m]; !ok {
				t.Errorf("no %s for %s/%s on node %s", m, ns, name, node)
			}
		}
		promtoolCheck(t, ev.root, raw)

		if err := fetch(); err != nil {
			t.Fatal(err)
		}
		var last map[string]float64
		err = poll(ctx, time.Second, func() error {
			s, _, err := ev.vmiSamples(ctx, node, labels)
			if err != nil {
				return err
			}
			last = s
			for _, r := range []struct {
				metric string
				by     float64
			}{
				{"kemu_vmi_cpu_usage_seconds_total", 0},
				{"kemu_vmi_vcpu_seconds_total", 0},
				{"kemu_vmi_storage_write_traffic_bytes_total", 1 << 20},
				{"kemu_vmi_storage_iops_write_total", 0},
				{"kemu_vmi_network_transmit_bytes_total", fetches * 65536},
				{"kemu_vmi_network_receive_bytes_total", 0},
			} {
				if s[r.metric] <= first[r.metric]+r.by {
					return fmt.Errorf("%s: %g → %g, want a rise of more than %g", r.metric, first[r.metric], s[r.metric], r.by)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range []string{"kemu_vmi_cpu_usage_seconds_total", "kemu_vmi_storage_write_traffic_bytes_total", "kemu_vmi_network_transmit_bytes_total"} {
			t.Logf("%s: %g → %g", m, first[m], last[m])
		}
	})

	t.Run("killed QEMU: Crashed event", func(t *testing.T) {
		pid := qemuPid(ctx, t, name)
		t0 := time.Now()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if err := poll(ctx, 250*time.Millisecond, func() error {
			v, err := ev.getVMI(ctx, name)
			if err != nil || v == nil || v.Status.Phase != v1.Failed {
				return fmt.Errorf("VMI not Failed yet (%v)", err)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		var crashed *corev1.Event
		if err := poll(ctx, 500*time.Millisecond, func() error {
			evs, err := ev.vmiEvents(ctx, name)
			if err != nil {
				return err
			}
			for i := range evs {
				if evs[i].Reason == "Crashed" {
					crashed = &evs[i]
					return nil
				}
			}
			return fmt.Errorf("no Crashed event yet: %s", eventReasons(evs))
		}); err != nil {
			t.Fatal(err)
		}
		t.Logf("Crashed event %s after SIGKILL to QEMU: %s %q", time.Since(t0).Round(time.Millisecond), crashed.Type, crashed.Message)
		if crashed.Type != corev1.EventTypeWarning || crashed.Message == "" {
			t.Errorf("Crashed event %s %q, want a Warning with QEMU's reason", crashed.Type, crashed.Message)
		}
		if out := ev.kubectl(t, "-n", ns, "describe", "vmi", name); !strings.Contains(out, "Crashed") {
			t.Errorf("kubectl describe vmi shows no Crashed event:\n%s", out)
		}
	})

	t.Run("series gone after delete", func(t *testing.T) {
		ev.deleteVMI(ctx, t, name)
		if err := poll(ctx, time.Second, func() error {
			s, _, err := ev.vmiSamples(ctx, node, labels)
			if err != nil {
				return err
			}
			if len(s) > 0 {
				return fmt.Errorf("%d series of the deleted VMI left", len(s))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	})
}

// TestStartFailures: a VMI whose launcher Pod the kubelet cannot start
// shows why. An image reference the kubelet refuses (InvalidImageName)
// fails the VMI with that reason; an image that cannot be pulled shows the
// pull error on the VMI while it waits. Both with a Warning event.
func TestStartFailures(t *testing.T) {
	ev := need(t)
	dumpOnFailure(t, ev)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name, image string
		reasons     []string // the waiting reasons it may show
		fails       bool
	}{
		// Upper case: api/validation takes it, the kubelet's parser does not.
		{"bad-image-name", "kemu.local/BadName:latest", []string{"InvalidImageName"}, true},
		{"unpullable", "registry.invalid/disk:1", []string{"ErrImagePull", "ImagePullBackOff"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Cleanup(func() { ev.c.Kubectl("-n", ns, "delete", "vmi", tc.name, "--ignore-not-found", "--timeout=2m") }) //nolint:errcheck // best effort
			m := strings.Replace(vmiManifest(vmiOptions{name: tc.name, noNetwork: true}), containerDiskImage, tc.image, 1)
			ev.apply(t, m)
			t0 := time.Now()
			var seen time.Time // when the launcher Pod first showed the waiting reason
			var vmi *v1.VirtualMachineInstance
			err := poll(ctx, 250*time.Millisecond, func() error {
				if seen.IsZero() && podWaiting(ctx, ev, tc.name, tc.reasons) {
					seen = time.Now()
				}
				v, err := ev.getVMI(ctx, tc.name)
				if err != nil || v == nil {
					return fmt.Errorf("VMI: %v", err)
				}
				vmi = v
				if tc.fails {
					if v.Status.Phase != v1.Failed || v.Status.Reason != tc.reasons[0] {
						return fmt.Errorf("phase %s reason %q", v.Status.Phase, v.Status.Reason)
					}
					return nil
				}
				c := condition(v, v1.VirtualMachineInstanceSynchronized)
				if c == nil || c.Status != corev1.ConditionFalse || !contains(tc.reasons, c.Reason) {
					return fmt.Errorf("Synchronized %+v", c)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			took := time.Since(t0)
			if !seen.IsZero() {
				took = time.Since(seen)
			}
			t.Logf("%s: phase %s reason %q, %s after the kubelet reported it (%s after apply)", tc.name, vmi.Status.Phase,
				vmi.Status.Reason, took.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
			if tc.fails && !seen.IsZero() && took > 10*time.Second {
				t.Errorf("the VMI failed %s after its Pod's waiting reason, want within 10 s", took)
			}
			if err := poll(ctx, 500*time.Millisecond, func() error {
				evs, err := ev.vmiEvents(ctx, tc.name)
				if err != nil {
					return err
				}
				for _, e := range evs {
					if e.Type == corev1.EventTypeWarning && contains(tc.reasons, e.Reason) {
						return nil
					}
				}
				return fmt.Errorf("no Warning event %v yet: %s", tc.reasons, eventReasons(evs))
			}); err != nil {
				t.Fatal(err)
			}
			out := ev.kubectl(t, "-n", ns, "get", "vmi", tc.name, "-o", "wide")
			t.Logf("kubectl get vmi -o wide:\n%s", out)
			if tc.fails && !strings.Contains(out, tc.reasons[0]) {
				t.Errorf("kubectl get vmi -o wide does not show %s", tc.reasons[0])
			}
		})
	}
}

// podWaiting says whether the VMI's launcher Pod has a container waiting
// with one of reasons.
func podWaiting(ctx context.Context, ev *env, vmi string, reasons []string) bool {
	pods, err := ev.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "kemu.dev/vmi-name=" + vmi})
	if err != nil {
		return false
	}
	for _, p := range pods.Items {
		for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			if w := cs.State.Waiting; w != nil && contains(reasons, w.Reason) {
				return true
			}
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// vmiEvents are the events of the VMI name, oldest first.
func (ev *env) vmiEvents(ctx context.Context, name string) ([]corev1.Event, error) {
	l, err := ev.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=VirtualMachineInstance,involvedObject.name=" + name})
	if err != nil {
		return nil, err
	}
	evs := l.Items
	for i := 1; i < len(evs); i++ { // insertion sort by first time seen
		for j := i; j > 0 && eventTime(evs[j]).Before(eventTime(evs[j-1])); j-- {
			evs[j], evs[j-1] = evs[j-1], evs[j]
		}
	}
	return evs, nil
}

func eventTime(e corev1.Event) time.Time {
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	if !e.FirstTimestamp.IsZero() {
		return e.FirstTimestamp.Time
	}
	return e.CreationTimestamp.Time
}

func eventReasons(evs []corev1.Event) string {
	var r []string
	for _, e := range evs {
		r = append(r, e.Reason)
	}
	return strings.Join(r, ", ")
}

// vmiSamples scrapes the node agent on node and returns the value of each
// kemu_vmi_* metric whose series carry labels (summed over its other
// labels: vCPU, drive, interface), and the whole scrape.
func (ev *env) vmiSamples(ctx context.Context, node string, labels map[string]string) (map[string]float64, []byte, error) {
	raw, err := ev.nodeAgentScrape(ctx, node)
	if err != nil {
		return nil, nil, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return nil, nil, fmt.Errorf("parsing the node agent's /metrics: %w", err)
	}
	out := map[string]float64{}
	for name, f := range families {
		if !strings.HasPrefix(name, "kemu_vmi_") {
			continue
		}
		for _, m := range f.GetMetric() {
			if !hasLabels(m, labels) {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				out[name] += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[name] += m.GetGauge().GetValue()
			case m.GetUntyped() != nil:
				out[name] += m.GetUntyped().GetValue()
			}
		}
	}
	return out, raw, nil
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}

// promtoolCheck runs promtool check metrics (make deps pins it) on a scrape.
func promtoolCheck(t *testing.T, root string, scrape []byte) {
	t.Helper()
	cmd := exec.Command(filepath.Join(root, "_out/tools/bin/promtool"), "check", "metrics")
	cmd.Stdin = bytes.NewReader(scrape)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// httpGetSize fetches url and checks it returned want bytes.
func httpGetSize(ctx context.Context, url string, want int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || n != int64(want) {
		return fmt.Errorf("GET %s: %s, %d bytes", url, resp.Status, n)
	}
	return nil
}
