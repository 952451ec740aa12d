package heartbeat

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

func TestConfigErrors(t *testing.T) {
	err := Beat(context.Background(), Config{})
	for _, want := range []string{"no Kubernetes client", "no node name", "no KVM probe"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Beat(Config{}) = %v, want it to say %q", err, want)
		}
	}
}

// The fake clientset only stands in for the patch request here; the real
// apiserver is used by the cluster test.
func TestBeatLabels(t *testing.T) {
	now := time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name                 string
		kvm, ready           bool
		readyNil             bool
		wantKVM, wantSchedul string
	}{
		{name: "tcg node, plugins registered", kvm: false, ready: true, wantKVM: "false", wantSchedul: "true"},
		{name: "kvm node, plugins not registered", kvm: true, ready: false, wantKVM: "true", wantSchedul: "false"},
		{name: "no readiness check", kvm: true, readyNil: true, wantKVM: "true", wantSchedul: "true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"other": "kept"}}})
			c := Config{Client: cs, NodeName: "n1", KVM: func(context.Context) bool { return tc.kvm },
				Ready: func() bool { return tc.ready }, Now: func() time.Time { return now }}
			if tc.readyNil {
				c.Ready = nil
			}
			if err := Beat(context.Background(), c); err != nil {
				t.Fatal(err)
			}
			n, err := cs.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if n.Labels[v1.NodeKVMLabel] != tc.wantKVM || n.Labels[v1.NodeSchedulableLabel] != tc.wantSchedul || n.Labels["other"] != "kept" {
				t.Errorf("labels %v", n.Labels)
			}
			if got := n.Annotations[v1.NodeHeartbeatAnnotation]; got != "2026-11-21T09:00:00Z" {
				t.Errorf("heartbeat %q", got)
			}
		})
	}
}

func TestRunMarksUnschedulableOnStop(t *testing.T) {
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	var beats atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	c := Config{Client: cs, NodeName: "n1", Interval: time.Millisecond, Jitter: -1,
		KVM: func(context.Context) bool {
			if beats.Add(1) == 3 {
				cancel()
			}
			return false
		}}
	done := make(chan error, 1)
	go func() { done <- Run(ctx, c) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	n, _ := cs.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	if n.Labels[v1.NodeSchedulableLabel] != "false" || n.Labels[v1.NodeKVMLabel] != "false" || n.Annotations[v1.NodeHeartbeatAnnotation] == "" {
		t.Errorf("after stop: labels %v annotations %v", n.Labels, n.Annotations)
	}
}

// TestRunWritesChangesAtOnce: with an hour between beats, a node that
// becomes ready and later learns that KVM works gets both labels within a
// few Watch periods, and Written reports what was written.
func TestRunWritesChangesAtOnce(t *testing.T) {
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	var ready, kvm, written atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := Config{Client: cs, NodeName: "n1", Interval: time.Hour, Watch: 5 * time.Millisecond,
		KVM: func(context.Context) bool { return kvm.Load() }, Ready: ready.Load, Written: written.Store}
	done := make(chan error, 1)
	go func() { done <- Run(ctx, c) }()
	waitLabels := func(schedulable, kvm string) {
		t.Helper()
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			n, err := cs.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if n.Labels[v1.NodeSchedulableLabel] == schedulable && n.Labels[v1.NodeKVMLabel] == kvm && written.Load() == (schedulable == "true") {
				return
			}
			if time.Now().After(end) {
				t.Fatalf("labels %v, written %v; want schedulable=%s kvm=%s", n.Labels, written.Load(), schedulable, kvm)
			}
		}
	}
	waitLabels("false", "false")
	ready.Store(true) // plugins registered: schedulable under TCG
	waitLabels("true", "false")
	kvm.Store(true) // the background probe finished: upgrade
	waitLabels("true", "true")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitLabels("false", "true")
}
