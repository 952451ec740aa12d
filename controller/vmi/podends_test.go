package vmi

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPodEnds(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	pod := func(name string, st corev1.PodStatus) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Status: st}
	}
	disrupted := corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.DisruptionTarget,
		Status: corev1.ConditionTrue, Reason: "DeletionByPodGC", Message: "PodGC: node is out of service"}}}
	for _, tc := range []struct {
		name       string
		pod        *corev1.Pod
		wantReason string // "": not recorded
	}{
		{"disrupted, deleted while running", pod("a", disrupted), "DeletionByPodGC"},
		{"failed", pod("b", corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted"}), "Evicted"},
		{"deleted while running normally", pod("c", corev1.PodStatus{Phase: corev1.PodRunning}), ""},
		{"a disruption that is not True", pod("d", corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
			{Type: corev1.DisruptionTarget, Status: corev1.ConditionFalse, Reason: "X"}}}), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e podEnds
			e.record(tc.pod, now)
			reason, msg, ok := e.get("ns", tc.pod.Name)
			if tc.wantReason == "" {
				if ok {
					t.Fatalf("recorded %q %q", reason, msg)
				}
				return
			}
			if !ok || reason != tc.wantReason || !strings.Contains(msg, "is gone") {
				t.Fatalf("get = %q, %q, %v; want %q", reason, msg, ok, tc.wantReason)
			}
			if _, _, ok := e.get("other", tc.pod.Name); ok {
				t.Error("found under another namespace")
			}
			e.forget("ns", tc.pod.Name)
			if _, _, ok := e.get("ns", tc.pod.Name); ok {
				t.Error("still there after forget")
			}
		})
	}
	t.Run("entries expire", func(t *testing.T) {
		var e podEnds
		e.record(pod("old", disrupted), now)
		e.record(pod("new", disrupted), now.Add(podEndTTL+time.Second))
		if _, _, ok := e.get("ns", "old"); ok {
			t.Error("an entry older than podEndTTL is kept")
		}
		if _, _, ok := e.get("ns", "new"); !ok {
			t.Error("the new entry is missing")
		}
	})
}
