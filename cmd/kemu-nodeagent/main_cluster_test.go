//go:build cluster && qemu

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
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
// unschedulable.
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
	cmd := exec.CommandContext(ctx, bin, "--kubeconfig", c.Kubeconfig, "--node-name", c.NodeName,
		"--kubelet-root", c.KubeletRootDir, "--device-plugin-dir", c.DevicePluginDir,
		"--probe-kernel", guest.Kernel, "--probe-initrd", guest.Initrd, "--probe-cache", filepath.Join(t.TempDir(), "kvm.json"),
		"--heartbeat-interval", "2s", "--health-addr", health)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
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

	wantKVM := "false"
	if kvm.Probe(ctx, kvm.Options{Kernel: guest.Kernel, Initrd: guest.Initrd}).Usable {
		wantKVM = "true"
	}
	var node *corev1.Node
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
