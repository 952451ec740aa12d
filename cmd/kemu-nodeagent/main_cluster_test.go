//go:build cluster && qemu

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/devices/kvm"
	"github.com/kemu-dev/kemu/test/cluster"
	"github.com/kemu-dev/kemu/test/testguest"
)

// TestNodeAgentOnRealNode runs the kemu-nodeagent binary against a real
// kubelet: its device plugins register (the Node's capacity shows
// devices.kemu.dev/tun, and kvm only where the KVM probe boots a guest),
// the Node gets kemu.dev/kvm, kemu.dev/schedulable=true and a heartbeat,
// /healthz answers 200 and /metrics has the VMI controller's metrics and
// the (empty) VMI metrics' error counter and passes promtool (the CRDs are
// not installed: the VMI controller waits without blocking the rest); on
// SIGTERM it exits 0 and the Node becomes
// unschedulable. The KVM probe runs in the background: the agent's QEMU
// (--qemu) is the real one behind a script that delays the probe's boot
// (accel=kvm) by probeDelay, as a host whose KVM hangs does; the Node is
// schedulable (and /healthz 200) before that, and kemu.dev/kvm follows
// the probe's verdict when it comes.
func TestNodeAgentOnRealNode(t *testing.T) {
	guest, err := testguest.Paths()
	if err != nil {
		t.Fatalf("test guest (make testguest): %v", err)
	}
	bin := filepath.Join(t.TempDir(), "kemu-nodeagent")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	c, err := cluster.Start(context.Background(), cluster.Options{Node: true, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Stop(); err != nil {
			t.Errorf("cluster stop: %v", err)
		}
	}()
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	health := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const probeDelay = 8 * time.Second
	slowQEMU := filepath.Join(t.TempDir(), "qemu-slow-kvm-probe")
	script := fmt.Sprintf("#!/bin/sh\ncase \"$*\" in *accel=kvm*) sleep %d;; esac\nexec qemu-system-x86_64 \"$@\"\n", int(probeDelay.Seconds()))
	if err := os.WriteFile(slowQEMU, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	cmd := exec.CommandContext(ctx, bin, "--qemu", slowQEMU, "--kubeconfig", c.Kubeconfig, "--node-name", c.NodeName,
		"--kubelet-root", c.KubeletRootDir, "--device-plugin-dir", c.DevicePluginDir,
		"--probe-kernel", guest.Kernel, "--probe-initrd", guest.Initrd, "--probe-cache", filepath.Join(t.TempDir(), "kvm.json"),
		"--heartbeat-interval", "2s", "--health-addr", health)
	logs := &testguest.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("kemu-nodeagent log:\n%s", logs.String())
		}
	}()

	// The reference probe runs beside the agent's (same guest, no cache).
	reference := make(chan kvm.Verdict, 1)
	go func() { reference <- kvm.Probe(ctx, kvm.Options{Kernel: guest.Kernel, Initrd: guest.Initrd}) }()
	var node *corev1.Node
	// Schedulable (and ready) first, whatever the probe is doing.
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		node, err = cs.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
		if err != nil || node.Labels[v1.NodeSchedulableLabel] != "true" {
			return false, err
		}
		resp, err := http.Get("http://" + health + "/healthz")
		if err != nil {
			return false, nil // not listening yet
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("node never became schedulable with /healthz 200: %v; labels %v", err, node.Labels)
	}
	toSchedulable := time.Since(started)
	t.Logf("agent start to schedulable=true and /healthz 200: %s (kvm=%s then)", toSchedulable.Round(time.Millisecond), node.Labels[v1.NodeKVMLabel])
	if toSchedulable >= probeDelay {
		t.Errorf("the node became schedulable %s after the agent started, its KVM probe takes more than %s: the probe held it back", toSchedulable, probeDelay)
	} else if node.Labels[v1.NodeKVMLabel] != "false" {
		t.Errorf("schedulable while the probe runs with %s=%q, want false (TCG)", v1.NodeKVMLabel, node.Labels[v1.NodeKVMLabel])
	}
	verdict := <-reference
	t.Logf("reference KVM probe: usable=%v (%s) took %s", verdict.Usable, verdict.Reason, verdict.Took)
	wantKVM := "false"
	if verdict.Usable {
		wantKVM = "true"
	}
	// The agent's own (delayed) probe finishes in the background.
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return strings.Contains(logs.String(), `"KVM probe" usable=`), nil
	})
	if err != nil {
		t.Fatalf("the agent's KVM probe never finished: %v", err)
	}
	t.Logf("agent start to its KVM probe's verdict: %s", time.Since(started).Round(time.Millisecond))
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		node, err = cs.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		tun := node.Status.Capacity["devices.kemu.dev/tun"]
		_, kvm := node.Status.Capacity["devices.kemu.dev/kvm"]
		return node.Labels[v1.NodeSchedulableLabel] == "true" && node.Labels[v1.NodeKVMLabel] == wantKVM &&
			node.Annotations[v1.NodeHeartbeatAnnotation] != "" && tun.Value() == 1000 && kvm == (wantKVM == "true"), nil
	})
	t.Logf("agent start to the verdict on the node (kvm=%s): %s", wantKVM, time.Since(started).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("node never showed the node agent's work: %v; labels %v, capacity %v", err, node.Labels, node.Status.Capacity)
	}
	resp, err := http.Get("http://" + health + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz: %s", resp.Status)
	}
	resp, err = http.Get("http://" + health + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{"kemu_nodeagent_launcher_connections", "go_goroutines", "kemu_nodeagent_vmi_stats_errors_total 0"} {
		if !bytes.Contains(metrics, []byte(m)) {
			t.Errorf("/metrics has no %s", m)
		}
	}
	promtool := exec.Command(filepath.Join("..", "..", "_out", "tools", "bin", "promtool"), "check", "metrics")
	promtool.Stdin = bytes.NewReader(metrics)
	if out, err := promtool.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("kemu-nodeagent exit: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("kemu-nodeagent did not stop on SIGTERM")
	}
	node, err = cs.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Labels[v1.NodeSchedulableLabel] != "false" {
		t.Errorf("after SIGTERM: %s=%q", v1.NodeSchedulableLabel, node.Labels[v1.NodeSchedulableLabel])
	}
	t.Logf("node labels %v, devices %v", node.Labels, fmt.Sprint(node.Status.Capacity["devices.kemu.dev/tun"]))
}
