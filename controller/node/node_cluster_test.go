//go:build cluster

package node

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	kemuinformers "github.com/kemu-dev/kemu/api/client/informers/externalversions"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/test/cluster"
	"k8s.io/client-go/tools/record"
)

// TestNodeController: on a real kube-apiserver (no kubelet: Nodes and Pods
// are made by hand), a node whose heartbeat is stale becomes unschedulable
// and its VMI without a launcher Pod fails NodeUnresponsive; the VMI whose
// Pod lives waits until the Pod is gone; a node going stale later is caught
// when it does; fresh and non-kemu nodes are left alone; a VMI on a node
// that no longer exists fails too. Needs make k8s.
func TestNodeController(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cluster.StartWithCRDs(ctx, t)
	kube := kubernetes.NewForConfigOrDie(c.RESTConfig())
	kemu := versioned.NewForConfigOrDie(c.RESTConfig())

	now := time.Now()
	mkNode := func(name string, hb *time.Time) {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
		if hb != nil {
			n.Labels[v1.NodeSchedulableLabel] = "true"
			n.Annotations = map[string]string{v1.NodeHeartbeatAnnotation: hb.UTC().Format(time.RFC3339)}
		}
		if _, err := kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	stale, fresh, aging := now.Add(-10*time.Minute), now, now.Add(-55*time.Second)
	mkNode("stale-node", &stale)
	mkNode("fresh-node", &fresh)
	mkNode("aging-node", &aging) // stale 5 s from now with a 1 min timeout
	mkNode("plain-node", nil)

	const ns = "default"
	mkVMI := func(name, node string) *v1.VirtualMachineInstance {
		vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		vmi, err := kemu.KemuV1alpha1().VirtualMachineInstances(ns).Create(ctx, vmi, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		vmi.Status.Phase = v1.Running
		vmi.Status.NodeName = node
		vmi.Status.Conditions = []v1.VirtualMachineInstanceCondition{{Type: v1.VirtualMachineInstanceReady, Status: corev1.ConditionTrue}}
		if vmi, err = kemu.KemuV1alpha1().VirtualMachineInstances(ns).UpdateStatus(ctx, vmi, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		return vmi
	}
	mkVMI("orphan", "stale-node")
	withPod := mkVMI("with-pod", "stale-node")
	mkVMI("fresh-vmi", "fresh-node")
	mkVMI("aging-vmi", "aging-node")
	mkVMI("lost-vmi", "deleted-node")
	yes := true
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "virt-launcher-with-pod", Namespace: ns,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1.APIVersion, Kind: "VirtualMachineInstance",
				Name: withPod.Name, UID: withPod.UID, Controller: &yes}}},
		Spec: corev1.PodSpec{NodeName: "stale-node", Containers: []corev1.Container{{Name: "compute", Image: "busybox"}}},
	}
	if _, err := kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	ki := kubeinformers.NewSharedInformerFactory(kube, 0)
	vi := kemuinformers.NewSharedInformerFactory(kemu, 0)
	ctrl, err := New(kube, kemu, ki, vi, &record.FakeRecorder{} /* discards events */, Options{HeartbeatTimeout: time.Minute, RecheckInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ctrl.Run(runCtx, 2) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	label := func(node string) string {
		n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		v, ok := n.Labels[v1.NodeSchedulableLabel]
		if !ok {
			return "<none>"
		}
		return v
	}
	vmiStatus := func(name string) v1.VirtualMachineInstanceStatus {
		vmi, err := kemu.KemuV1alpha1().VirtualMachineInstances(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return vmi.Status
	}
	failedUnresponsive := func(name string) bool {
		st := vmiStatus(name)
		return st.Phase == v1.Failed && st.Reason == ReasonNodeUnresponsive
	}
	poll := func(what string, timeout time.Duration, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true,
			func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("timed out waiting for %s", what)
		}
	}

	start := time.Now()
	poll("stale-node unschedulable", 20*time.Second, func() bool { return label("stale-node") == "false" })
	poll("orphan VMI failed", 20*time.Second, func() bool { return failedUnresponsive("orphan") })
	poll("VMI on a deleted node failed", 20*time.Second, func() bool { return failedUnresponsive("lost-vmi") })
	if st := vmiStatus("orphan"); len(st.Conditions) != 1 || st.Conditions[0].Status != corev1.ConditionFalse {
		t.Errorf("orphan Ready condition: %+v", st.Conditions)
	}
	if st := vmiStatus("with-pod"); st.Phase != v1.Running {
		t.Errorf("VMI with a live launcher Pod: %s %s", st.Phase, st.Reason)
	}
	// The aging node goes stale about 5 s after the start: caught by the
	// requeue after its remaining time, not before.
	if label("aging-node") != "true" {
		t.Errorf("aging-node marked before its heartbeat went stale")
	}
	poll("aging-node unschedulable", 30*time.Second, func() bool { return label("aging-node") == "false" })
	if d := time.Since(start); d < 2*time.Second {
		t.Errorf("aging-node marked after %s, before its heartbeat was 60 s old", d)
	}
	poll("aging VMI failed", 20*time.Second, func() bool { return failedUnresponsive("aging-vmi") })

	// The Pod goes (as Kubernetes' eviction would do): the VMI fails.
	if st := vmiStatus("with-pod"); st.Phase != v1.Running {
		t.Errorf("VMI with a live launcher Pod: %s %s", st.Phase, st.Reason)
	}
	zero := int64(0)
	if err := kube.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	poll("VMI failed once its Pod is gone", 20*time.Second, func() bool { return failedUnresponsive("with-pod") })

	// Fresh and non-kemu nodes are untouched.
	if l := label("fresh-node"); l != "true" {
		t.Errorf("fresh-node: schedulable=%s", l)
	}
	if l := label("plain-node"); l != "<none>" {
		t.Errorf("plain-node got schedulable=%s", l)
	}
	if st := vmiStatus("fresh-vmi"); st.Phase != v1.Running {
		t.Errorf("fresh VMI: %s %s", st.Phase, st.Reason)
	}
	fmt.Fprintf(os.Stderr, "node controller test: %s\n", time.Since(start))
}
