//go:build cluster

package deviceplugin_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kemu-dev/kemu/devices/deviceplugin"
	"github.com/kemu-dev/kemu/devices/kvm"
	"github.com/kemu-dev/kemu/test/cluster"
	"github.com/kemu-dev/kemu/test/testguest"
)

const (
	resKVM   corev1.ResourceName = "devices.kemu.dev/kvm"
	resTun   corev1.ResourceName = "devices.kemu.dev/tun"
	resVhost corev1.ResourceName = "devices.kemu.dev/vhost-net"
	slots                        = 1000
)

// TestRealKubelet runs kemu's device plugins (as kemu-nodeagent does:
// kvm with the real KVM probe, tun, vhost-net) against a real kubelet:
//   - the Node's capacity and allocatable of each resource follow the host: tun
//     1000 where /dev/net/tun exists, kvm only where the probe says KVM runs
//     guests, vhost-net only where /dev/vhost-net exists;
//   - a container requesting devices.kemu.dev/tun gets /dev/net/tun (the
//     plugin's Allocate DeviceSpec: node created, device cgroup opened) and
//     a container of the same Pod without the request does not;
//   - after a kubelet restart the plugins register again, the capacity comes
//     back and a new Pod gets the device.
func TestRealKubelet(t *testing.T) {
	if !deviceplugin.IsCharDevice("/dev/net/tun") {
		t.Skip("no /dev/net/tun on this host: nothing to allocate (TestPlugin covers the unhealthy side)")
	}
	// The KVM probe boots the test guest (up to 15 s when KVM hangs); it
	// runs while the node starts.
	guest, err := testguest.Paths()
	if err != nil {
		t.Fatalf("%v (run: make testguest)", err)
	}
	verdict := make(chan kvm.Verdict, 1)
	go func() {
		verdict <- kvm.Probe(context.Background(), kvm.Options{Kernel: guest.Kernel, Initrd: guest.Initrd,
			CacheFile: filepath.Join(t.TempDir(), "kvm.json")})
	}()

	c, err := cluster.Start(context.Background(), cluster.Options{Node: true, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Stop(); err != nil {
			t.Errorf("cluster stop: %v", err)
		}
	}()
	t.Logf("node Ready in %s (lock wait %s)", c.StartupDuration.Round(time.Millisecond), c.NodeLockWait.Round(time.Millisecond))

	v := <-verdict
	t.Logf("KVM probe: usable=%v (%s)", v.Usable, v.Reason)
	want := map[corev1.ResourceName]int64{resTun: slots, resKVM: 0, resVhost: 0}
	if v.Usable {
		want[resKVM] = slots
	}
	if deviceplugin.IsCharDevice("/dev/vhost-net") {
		want[resVhost] = slots
	}

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	m := &deviceplugin.Manager{Plugins: []*deviceplugin.Plugin{
		deviceplugin.KVM(c.DevicePluginDir, func() bool { return v.Usable }),
		deviceplugin.Tun(c.DevicePluginDir),
		deviceplugin.VhostNet(c.DevicePluginDir),
	}}
	for _, p := range m.Plugins {
		p.Slots = slots
	}
	t0 := time.Now()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := m.Stop(); err != nil {
			t.Errorf("device plugins: %v", err)
		}
	}()
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	res, err := waitAllocatable(ctx, cs, c.NodeName, want)
	if err != nil {
		t.Fatalf("%v\n--- kubelet ---\n%s", err, c.Logs("kubelet", 30))
	}
	t.Logf("node %s %s after the plugins started", res, time.Since(t0).Round(time.Millisecond))

	runTunPod(ctx, t, c, cs, "tun-1")

	// Kubelet restart: the kubelet deletes the plugin sockets and recreates
	// kubelet.sock; the plugins must notice and register again.
	t0 = time.Now()
	if err := c.RestartKubelet(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("kubelet restarted (Ready) in %s", time.Since(t0).Round(time.Millisecond))
	// The log is appended to; each start writes a "+ <command>" line.
	klog := c.Nodes[0].LogPath("kubelet")
	if err := cluster.Poll(ctx, func() error {
		b, err := os.ReadFile(klog)
		if err != nil {
			return err
		}
		s := string(b)
		if !strings.Contains(s[strings.LastIndex(s, "\n+ ")+1:], `registration request from device plugin with resource" resourceName="devices.kemu.dev/tun"`) {
			return fmt.Errorf("the new kubelet logged no registration of %s", resTun)
		}
		return nil
	}); err != nil {
		t.Fatalf("%v\n--- kubelet ---\n%s", err, c.Logs("kubelet", 30))
	}
	if res, err = waitAllocatable(ctx, cs, c.NodeName, want); err != nil {
		t.Fatalf("after the kubelet restart: %v", err)
	}
	t.Logf("plugins registered again, node %s, %s after the restart began", res, time.Since(t0).Round(time.Millisecond))
	runTunPod(ctx, t, c, cs, "tun-2")
}

// runTunPod runs a Pod whose container "with" requests one tun device and
// whose container "without" does not; both look for /dev/net/tun and try to
// open it.
func runTunPod(ctx context.Context, t *testing.T, c *cluster.Cluster, cs kubernetes.Interface, name string) {
	t.Helper()
	script := `if [ -c /dev/net/tun ]; then ls -l /dev/net/tun; if exec 3<>/dev/net/tun; then echo tun-open-ok; else echo tun-open-failed; fi; else echo tun-absent; fi`
	ctr := func(n string, limits corev1.ResourceList) corev1.Container {
		return corev1.Container{
			Name: n, Image: cluster.BusyboxImage, ImagePullPolicy: corev1.PullNever,
			Command:   []string{"/bin/sh", "-c", script},
			Resources: corev1.ResourceRequirements{Limits: limits},
		}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{
				ctr("with", corev1.ResourceList{resTun: resource.MustParse("1")}),
				ctr("without", nil),
			},
		},
	}
	t0 := time.Now()
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if _, _, err := c.Kubectl("delete", "pod", name, "--wait=true", "--timeout=90s"); err != nil {
			t.Errorf("deleting pod %s: %v", name, err)
		}
	}()
	var last *corev1.Pod
	if err := cluster.Poll(ctx, func() error {
		p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		last = p
		switch p.Status.Phase {
		case corev1.PodSucceeded:
			return nil
		case corev1.PodFailed:
			return cluster.StopPolling{Err: fmt.Errorf("pod %s failed: %s", name, p.Status.Message)}
		}
		return fmt.Errorf("pod %s is %s", name, p.Status.Phase)
	}); err != nil {
		t.Fatalf("%v (%+v)\n--- kubelet ---\n%s", err, last.Status, c.Logs("kubelet", 30))
	}
	t.Logf("pod %s Succeeded %s after create", name, time.Since(t0).Round(time.Millisecond))
	with, _, err := c.Kubectl("logs", name, "-c", "with")
	if err != nil {
		t.Fatal(err)
	}
	without, _, err := c.Kubectl("logs", name, "-c", "without")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("with devices.kemu.dev/tun: %s", strings.TrimSpace(with))
	t.Logf("without: %s", strings.TrimSpace(without))
	if !strings.Contains(with, "/dev/net/tun") || !strings.HasPrefix(strings.TrimSpace(with), "c") || !strings.Contains(with, "tun-open-ok") {
		t.Errorf("the container that requested %s does not have a usable /dev/net/tun:\n%s", resTun, with)
	}
	if !strings.Contains(without, "tun-absent") {
		t.Errorf("the container that did not request %s has /dev/net/tun:\n%s", resTun, without)
	}
}

// waitAllocatable polls the Node until its capacity and allocatable count of
// every resource in want match (0 also matches an absent resource) and
// returns the devices.kemu.dev part of its capacity and allocatable.
func waitAllocatable(ctx context.Context, cs kubernetes.Interface, node string, want map[corev1.ResourceName]int64) (string, error) {
	var last string
	err := cluster.Poll(ctx, func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var diffs []string
		// Only working devices are advertised (a plugin registers once its
		// device is healthy): an absent or unusable one is in neither
		// capacity nor allocatable.
		for r, w := range want {
			for what, l := range map[string]corev1.ResourceList{"capacity": n.Status.Capacity, "allocatable": n.Status.Allocatable} {
				got := int64(0)
				if q, ok := l[r]; ok {
					got = q.Value()
				}
				if got != w {
					diffs = append(diffs, fmt.Sprintf("%s %s=%d want %d", what, r, got, w))
				}
			}
		}
		last = fmt.Sprintf("capacity %v allocatable %v", devices(n.Status.Capacity), devices(n.Status.Allocatable))
		if len(diffs) > 0 {
			return errors.New(strings.Join(diffs, ", "))
		}
		return nil
	})
	if err != nil {
		return last, fmt.Errorf("node %s: %w (%s)", node, err, last)
	}
	return last, nil
}

// devices keeps the devices.kemu.dev resources of a list.
func devices(l corev1.ResourceList) map[string]string {
	out := map[string]string{}
	for r, q := range l {
		if strings.HasPrefix(string(r), "devices.kemu.dev/") {
			out[string(r)] = q.String()
		}
	}
	return out
}
