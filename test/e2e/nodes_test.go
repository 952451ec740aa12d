//go:build cluster && qemu

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/test/cluster"
)

// clientUserData is a user-data script that fetches url until it answers
// with want, then says so on the console.
func clientUserData(url, want string) string {
	return fmt.Sprintf(`#!/bin/sh
i=0
while [ $i -lt 600 ]; do
	if out=$(wget -q -O - %[1]s) && [ "$out" = %[2]s ]; then
		echo "KEMU-E2E fetched %[1]s got=$out" > /dev/console
		exit 0
	fi
	i=$((i+1))
	sleep 1
done
exit 1
`, url, want)
}

// TestTwoNodes: a VMI pinned to each node runs there; the launcher Pod on
// the second node is found by that node's agent only; the guest on the
// first node reaches the guest on the second node's Pod IP over TCP.
func TestTwoNodes(t *testing.T) {
	ev := need(t)
	dumpOnFailure(t, ev)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	a, b := ev.c.Nodes[0], ev.c.Nodes[1]
	sel := "kemu-e2e=two-nodes"
	t.Cleanup(func() { ev.c.Kubectl("-n", ns, "delete", "vmi", "-l", sel, "--ignore-not-found", "--timeout=3m") }) //nolint:errcheck // best effort
	labels := map[string]string{"kemu-e2e": "two-nodes"}

	t0 := time.Now()
	ev.apply(t, vmiManifest(vmiOptions{name: "on-b", node: b.Name, userData: webUserData, ports: []int{8080}, labels: labels}))
	server := ev.waitRunning(ctx, t, "on-b", bootTimeout)
	if server.Status.NodeName != b.Name {
		t.Fatalf("VMI on-b pinned to %s runs on %q", b.Name, server.Status.NodeName)
	}
	t.Logf("VMI on-b Running on %s %s after apply", b.Name, time.Since(t0).Round(time.Millisecond))
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer wcancel()
	if err := ev.launcherConnections(wctx, b.Name, 1); err != nil {
		t.Fatal(err)
	}
	if err := ev.launcherConnections(wctx, a.Name, 0); err != nil {
		t.Fatalf("the launcher on %s: %v", b.Name, err)
	}
	t.Logf("the launcher Pod on %s is connected to %s's node agent, not to %s's", b.Name, b.Name, a.Name)

	pod, err := ev.kube.CoreV1().Pods(ns).Get(ctx, server.Status.LauncherPod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(pod.Status.PodIP, strings.TrimSuffix(b.PodCIDR, "0/24")) {
		t.Errorf("launcher Pod IP %s is not in %s's range %s", pod.Status.PodIP, b.Name, b.PodCIDR)
	}
	url := fmt.Sprintf("http://%s:8080/index.html", pod.Status.PodIP)
	t1 := time.Now()
	ev.apply(t, vmiManifest(vmiOptions{name: "on-a", node: a.Name, userData: clientUserData(url, "kemu-e2e-hello"), labels: labels}))
	client := ev.waitRunning(ctx, t, "on-a", bootTimeout)
	if client.Status.NodeName != a.Name {
		t.Fatalf("VMI on-a pinned to %s runs on %q", a.Name, client.Status.NodeName)
	}
	if err := ev.launcherConnections(wctx, a.Name, 1); err != nil {
		t.Fatal(err)
	}
	con := ev.startConsole(t, "on-a")
	want := "KEMU-E2E fetched " + url + " got=kemu-e2e-hello"
	if err := con.waitFor(ctx, want, 5*time.Minute); err != nil {
		t.Fatalf("the guest on %s did not reach the guest on %s: %v", a.Name, b.Name, err)
	}
	t.Logf("guest on %s fetched %s from the guest on %s, %s after its apply", a.Name, url, b.Name, time.Since(t1).Round(time.Millisecond))
	ev.kubectl(t, "-n", ns, "delete", "vmi", "-l", sel, "--timeout=3m")
	ev.waitPodsGone(ctx, t, sel)
}

// TestNodeFailure: the node of a VM's VMI fails (kubelet, containerd, node
// agent and QEMU die at once; test/cluster's Node.Stop). kemu's node
// controller labels it unschedulable once its heartbeat is stale; the
// operator marks it out of service (Kubernetes' non-graceful node
// shutdown), Kubernetes deletes its Pods, the VMI fails (NodeUnresponsive)
// and the VM (runStrategy Always) starts a new VMI on the other node. The
// node then comes back and is schedulable again.
func TestNodeFailure(t *testing.T) {
	ev := need(t)
	dumpOnFailure(t, ev)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	const name = "survivor"
	t.Cleanup(func() {
		ev.c.Kubectl("-n", ns, "delete", "vm", name, "--ignore-not-found", "--timeout=3m") //nolint:errcheck // best effort
	})

	// The failing node is the one without kemu-controller (a controller
	// on a dead node would wait for Kubernetes to move it first).
	ctrl, err := ev.kube.CoreV1().Pods(kemuNS).List(ctx, metav1.ListOptions{LabelSelector: controllerSelector})
	if err != nil || len(ctrl.Items) != 1 {
		t.Fatalf("controller Pods: %v %v", err, ctrl)
	}
	var a, b *cluster.Node // a survives, b fails
	for _, n := range ev.c.Nodes[:2] {
		if n.Name == ctrl.Items[0].Spec.NodeName {
			a = n
		} else {
			b = n
		}
	}
	if a == nil {
		t.Fatalf("the controller runs on %q, none of the first two nodes", ctrl.Items[0].Spec.NodeName)
	}

	// The VM's first VMI goes to b: a is cordoned while it is scheduled.
	ev.kubectl(t, "cordon", a.Name)
	uncordoned := false
	uncordon := func() {
		if !uncordoned {
			ev.kubectl(t, "uncordon", a.Name)
			uncordoned = true
		}
	}
	defer uncordon()
	ev.apply(t, vmiManifest(vmiOptions{kind: "VirtualMachine", name: name, labels: map[string]string{"kemu-e2e": name}}))
	vmi := ev.waitRunning(ctx, t, name, bootTimeout)
	uncordon()
	if vmi.Status.NodeName != b.Name {
		t.Fatalf("VMI %s runs on %q, want %s (the other node was cordoned)", name, vmi.Status.NodeName, b.Name)
	}
	qemu := qemuPid(ctx, t, name)
	pw := ev.watchPhases(ctx, t, "kemu-e2e="+name)

	t0 := time.Now()
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	defer func() {
		if !restarted {
			ev.c.Kubectl("taint", "nodes", b.Name, "node.kubernetes.io/out-of-service-") //nolint:errcheck // best effort
			if err := b.Start(context.Background()); err != nil {
				t.Errorf("starting %s again: %v", b.Name, err)
			}
		}
	}()
	if p := qemuPids(name); len(p) > 0 {
		t.Errorf("QEMU of %s still runs after its node stopped: %v (was %d)", name, p, qemu)
	}
	t.Logf("node %s stopped: kubelet, containerd, node agent and QEMU (pid %d) gone", b.Name, qemu)

	// kemu: a stale heartbeat makes the node unschedulable.
	wctx, wcancel := context.WithTimeout(ctx, heartbeatTimeout+2*time.Minute)
	defer wcancel()
	if err := ev.waitSchedulable(wctx, b.Name, "false"); err != nil {
		t.Fatal(err)
	}
	t.Logf("node %s labelled %s=false %s after it stopped (heartbeat timeout %s)", b.Name, v1.NodeSchedulableLabel, time.Since(t0).Round(time.Millisecond), heartbeatTimeout)
	// The VMI stays while its Pod may still run: kemu cannot tell a dead
	// node from a cut-off one.
	if cur, err := ev.getVMI(ctx, name); err != nil || cur == nil || cur.UID != vmi.UID || cur.Status.Phase != v1.Running {
		t.Errorf("VMI %s while its Pod is still in the API: %v %+v", name, err, cur)
	}

	// Kubernetes: NotReady, then the operator's out-of-service taint lets
	// the Pods of the node go.
	if err := poll(wctx, time.Second, func() error {
		n, err := ev.kube.CoreV1().Nodes().Get(ctx, b.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("node %s still Ready", b.Name)
	}); err != nil {
		t.Fatal(err)
	}
	ev.kubectl(t, "taint", "nodes", b.Name, "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute")
	t.Logf("node %s NotReady and tainted out-of-service %s after it stopped", b.Name, time.Since(t0).Round(time.Millisecond))

	rctx, rcancel := context.WithTimeout(ctx, 2*time.Minute+2*bootTimeout)
	defer rcancel()
	failed, err := pw.waitFor(rctx, func(e phaseEvent) bool { return e.uid == string(vmi.UID) && e.phase == v1.Failed })
	if err != nil {
		t.Fatalf("the VMI on the failed node did not fail: %v; phases: %s", err, pw.summary())
	}
	t.Logf("VMI %s (uid %s) Failed (%s) %s after the node stopped", name, vmi.UID, failed.reason, failed.at.Sub(t0).Round(time.Millisecond))
	// Whoever sees it first: kemu's node controller (no launcher Pod left on
	// a stale node) or the VMI controller (the Pod failed, disrupted by
	// Kubernetes' taint eviction or Pod garbage collection).
	if r := failed.reason; r != "NodeUnresponsive" && !strings.HasPrefix(r, "DeletionBy") {
		t.Errorf("failed VMI reason %q, want NodeUnresponsive or Kubernetes' DeletionBy* disruption", r)
	}
	up, err := pw.waitFor(rctx, func(e phaseEvent) bool {
		return e.name == name && e.uid != string(vmi.UID) && e.phase == v1.Running && e.typ != watch.Deleted
	})
	if err != nil {
		t.Fatalf("no new VMI Running: %v; phases: %s", err, pw.summary())
	}
	now, err := ev.getVMI(ctx, name)
	if err != nil || now == nil {
		t.Fatal(err)
	}
	if now.Status.NodeName != a.Name {
		t.Errorf("the VM's new VMI runs on %q, want %s", now.Status.NodeName, a.Name)
	}
	t.Logf("new VMI (uid %s) Running on %s %s after the node stopped; phases: %s", up.uid, now.Status.NodeName, up.at.Sub(t0).Round(time.Millisecond), pw.summary())

	// The node comes back: Ready, its agent beats, schedulable again.
	ev.kubectl(t, "taint", "nodes", b.Name, "node.kubernetes.io/out-of-service-")
	t1 := time.Now()
	restarted = true
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	bctx, bcancel := context.WithTimeout(ctx, 3*time.Minute)
	defer bcancel()
	if err := ev.waitSchedulable(bctx, b.Name, "true"); err != nil {
		t.Fatal(err)
	}
	t.Logf("node %s back and schedulable %s after its start", b.Name, time.Since(t1).Round(time.Millisecond))
	ev.kubectl(t, "-n", ns, "delete", "vm", name, "--timeout=3m")
	ev.waitPodsGone(ctx, t, "kemu.dev/vmi-name="+name)
}

// waitSchedulable waits until the node's kemu.dev/schedulable label is want.
func (ev *env) waitSchedulable(ctx context.Context, node, want string) error {
	return poll(ctx, time.Second, func() error {
		n, err := ev.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := n.Labels[v1.NodeSchedulableLabel]; got != want {
			return fmt.Errorf("node %s %s=%q, want %q", node, v1.NodeSchedulableLabel, got, want)
		}
		return nil
	})
}
