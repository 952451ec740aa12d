package vmi

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// A launcher Pod's events are keyed to its VMI by the Pod's controller
// reference, which holds the whole name: the vmi-name label holds a cut,
// hashed name when the VMI's name is no label value (more than 63
// characters).
func TestEnqueuePod(t *testing.T) {
	isController := true
	long := strings.Repeat("a", 62) + "." + strings.Repeat("b", 100)
	vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: long, Namespace: "ns", UID: "uid-1"}}
	owned := func(labelValue string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns",
			Labels:          map[string]string{launcherpod.VMINameLabel: labelValue},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vmi, v1.SchemeGroupVersion.WithKind("VirtualMachineInstance"))}}}
	}
	for _, tc := range []struct {
		name string
		obj  any
		want string // "" = nothing queued
	}{
		{"owner reference, hashed label", owned("aaaa-0123456789"), "ns/" + long},
		{"deleted, final state unknown", cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: owned("x")}, "ns/" + long},
		{"no owner: the label", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Labels: map[string]string{launcherpod.VMINameLabel: "vm1"}}}, "ns/vm1"},
		{"another controller's Pod", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", Controller: &isController}}}}, ""},
		{"not a Pod", "x", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Controller{queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())}
			defer c.queue.ShutDown()
			c.enqueuePod(tc.obj)
			if tc.want == "" {
				if c.queue.Len() != 0 {
					t.Fatalf("%d keys queued", c.queue.Len())
				}
				return
			}
			if c.queue.Len() != 1 {
				t.Fatalf("%d keys queued, want 1", c.queue.Len())
			}
			if got, _ := c.queue.Get(); got != tc.want {
				t.Errorf("queued %q, want %q", got, tc.want)
			}
		})
	}
}
