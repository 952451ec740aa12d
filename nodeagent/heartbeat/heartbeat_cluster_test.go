//go:build cluster && qemu

package heartbeat_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/devices/kvm"
	"github.com/kemu-dev/kemu/launcher/cmdline"
	"github.com/kemu-dev/kemu/nodeagent/heartbeat"
	"github.com/kemu-dev/kemu/test/cluster"
	"github.com/kemu-dev/kemu/test/testguest"
)

// TestHeartbeatOnRealAPIServer publishes the real KVM probe's verdict and
// the heartbeat on a Node of a real kube-apiserver, then marks the node
// unschedulable on stop. Needs make k8s and the test guest (make testguest).
func TestHeartbeatOnRealAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a, err := testguest.Paths()
	if err != nil {
		t.Fatalf("test guest (make testguest): %v", err)
	}
	c, err := cluster.Start(ctx, cluster.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	cs := kubernetes.NewForConfigOrDie(c.RESTConfig())
	// No kubelet here: the Node object is created the way a kubelet registers.
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "hb-node"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The probe runs once (as the node agent does at start; its verdict is cached).
	verdict := kvm.Probe(ctx, kvm.Options{Kernel: a.Kernel, Initrd: a.Initrd, CacheFile: t.TempDir() + "/kvm.json"})
	probe := func(context.Context) bool { return verdict.Usable }
	var registered atomic.Bool
	cfg := heartbeat.Config{Client: cs, NodeName: "hb-node", Interval: 200 * time.Millisecond, KVM: probe,
		Ready: registered.Load}

	if err := heartbeat.Beat(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, "hb-node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("KVM probe: usable=%v reason=%q took %s", verdict.Usable, verdict.Reason, verdict.Took)
	if want := map[bool]string{true: "true", false: "false"}[verdict.Usable]; n.Labels[v1.NodeKVMLabel] != want {
		t.Errorf("%s = %q, probe says %v", v1.NodeKVMLabel, n.Labels[v1.NodeKVMLabel], verdict.Usable)
	}
	if n.Labels[v1.NodeSchedulableLabel] != "false" {
		t.Errorf("schedulable before the device plugins registered: %v", n.Labels)
	}
	first, err := time.Parse(time.RFC3339, n.Annotations[v1.NodeHeartbeatAnnotation])
	if err != nil {
		t.Fatalf("heartbeat annotation: %v", err)
	}

	// Running: schedulable once ready, the heartbeat moves on; stop: unschedulable.
	registered.Store(true)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- heartbeat.Run(rctx, cfg) }()
	deadline := time.Now().Add(time.Minute)
	for {
		n, err = cs.CoreV1().Nodes().Get(ctx, "hb-node", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		hb, _ := time.Parse(time.RFC3339, n.Annotations[v1.NodeHeartbeatAnnotation])
		if n.Labels[v1.NodeSchedulableLabel] == "true" && hb.After(first) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no fresh heartbeat with schedulable=true: %v %v", n.Labels, n.Annotations)
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	n, err = cs.CoreV1().Nodes().Get(ctx, "hb-node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Labels[v1.NodeSchedulableLabel] != "false" {
		t.Errorf("after stop: %v", n.Labels)
	}
}

// TestMachineTypeLabels labels a node with the machine types the real
// QEMU lists, and removes the label of a type the QEMU no longer has (as
// after an upgrade from 7.2 to 10.0, which dropped pc-i440fx-1.4).
func TestMachineTypeLabels(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ms, err := cmdline.DetectMachines(ctx, "qemu-system-x86_64")
	if err != nil {
		t.Fatal(err)
	}
	c, err := cluster.Start(ctx, cluster.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	cs := kubernetes.NewForConfigOrDie(c.RESTConfig())
	gone := v1.NodeMachineTypeLabelPrefix + "pc-q35-0.1"
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "mt-node",
		Labels: map[string]string{gone: "true", "other": "kept"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	types := slices.Sorted(maps.Keys(ms))
	cfg := heartbeat.Config{Client: cs, NodeName: "mt-node", KVM: func(context.Context) bool { return false }, MachineTypes: types}
	if err := heartbeat.Beat(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, "mt-node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"q35", "pc", ms.Resolve("q35"), ms.Resolve("pc")} {
		label, _ := v1.MachineTypeNodeSelector(m)
		if m == "q35" || m == "pc" {
			label = v1.NodeMachineTypeLabelPrefix + m
		}
		if n.Labels[label] != "true" {
			t.Errorf("no label %s=true for QEMU's machine type %s", label, m)
		}
	}
	if _, ok := n.Labels[gone]; ok || n.Labels["other"] != "kept" {
		t.Errorf("labels after the beat: %v", n.Labels)
	}
	count := 0
	for k := range n.Labels {
		if strings.HasPrefix(k, v1.NodeMachineTypeLabelPrefix) {
			count++
		}
	}
	t.Logf("%d machine type labels for %d machine types of QEMU", count, len(types))
	if count != len(types) {
		t.Errorf("%d machine type labels, QEMU lists %d", count, len(types))
	}
}
