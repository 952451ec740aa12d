package subresource

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned/fake"
	"github.com/kemu-dev/kemu/api/subresources"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

func testVMI(phase v1.VirtualMachineInstancePhase, annotations map[string]string, conds ...v1.VirtualMachineInstanceCondition) *v1.VirtualMachineInstance {
	return &v1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "uid-1", Annotations: annotations},
		Status:     v1.VirtualMachineInstanceStatus{Phase: phase, Conditions: conds, NodeName: "node1"},
	}
}

var (
	pausedTrue  = v1.VirtualMachineInstanceCondition{Type: v1.VirtualMachineInstancePaused, Status: corev1.ConditionTrue, Reason: "PausedByUser"}
	pausedFalse = v1.VirtualMachineInstanceCondition{Type: v1.VirtualMachineInstancePaused, Status: corev1.ConditionFalse, Reason: "Failed", Message: "QEMU said no"}
)

// What each request refuses and the annotations it merges (moved here
// with the plans from kemuctl; kemuctl tests when each is done).
func TestVMIRequestPlans(t *testing.T) {
	now := time.Date(2024, 5, 6, 7, 8, 9, 123, time.UTC)
	deleting := testVMI(v1.Running, nil)
	deleting.DeletionTimestamp = &metav1.Time{Time: now}
	pause := func(vmi *v1.VirtualMachineInstance, _ time.Time) (map[string]any, error) { return PlanPause(vmi) }
	unpause := func(vmi *v1.VirtualMachineInstance, _ time.Time) (map[string]any, error) { return PlanUnpause(vmi) }
	for _, tc := range []struct {
		name  string
		plan  func(*v1.VirtualMachineInstance, time.Time) (map[string]any, error)
		vmi   *v1.VirtualMachineInstance
		err   string
		patch map[string]any
	}{
		{name: "pause", plan: pause, vmi: testVMI(v1.Running, nil),
			patch: map[string]any{"kemu.dev/paused": "true"}},
		{name: "pause again while pending", plan: pause, vmi: testVMI(v1.Running, map[string]string{"kemu.dev/paused": "true"}, pausedFalse),
			patch: map[string]any{"kemu.dev/paused": "true"}},
		{name: "pause paused", plan: pause, vmi: testVMI(v1.Running, nil, pausedTrue), err: "VMI ns/a is already paused"},
		{name: "pause scheduled", plan: pause, vmi: testVMI(v1.Scheduled, nil), err: "VMI ns/a is not running (phase Scheduled)"},
		{name: "pause new", plan: pause, vmi: testVMI("", nil), err: "VMI ns/a is not running (phase none yet)"},
		{name: "pause succeeded", plan: pause, vmi: testVMI(v1.Succeeded, nil), err: "VMI ns/a is not running (phase Succeeded)"},
		{name: "pause deleting", plan: pause, vmi: deleting, err: "VMI ns/a is stopping"},
		{name: "unpause", plan: unpause, vmi: testVMI(v1.Running, map[string]string{"kemu.dev/paused": "true"}, pausedTrue),
			patch: map[string]any{"kemu.dev/paused": nil}},
		{name: "unpause paused by startStrategy", plan: unpause, vmi: testVMI(v1.Running, nil, pausedTrue),
			patch: map[string]any{"kemu.dev/paused": "false"}},
		{name: "unpause a pending pause", plan: unpause, vmi: testVMI(v1.Running, map[string]string{"kemu.dev/paused": "true"}),
			patch: map[string]any{"kemu.dev/paused": nil}},
		{name: "unpause running", plan: unpause, vmi: testVMI(v1.Running, map[string]string{"kemu.dev/paused": "false"}), err: "VMI ns/a is not paused"},
		{name: "unpause failed", plan: unpause, vmi: testVMI(v1.Failed, nil, pausedTrue), err: "VMI ns/a is not running (phase Failed)"},
		{name: "soft-reboot", plan: PlanSoftReboot, vmi: testVMI(v1.Running, nil),
			patch: map[string]any{"kemu.dev/soft-reboot": "2024-05-06T07:08:09.000000123Z"}},
		{name: "soft-reboot paused", plan: PlanSoftReboot, vmi: testVMI(v1.Running, nil, pausedTrue), err: "VMI ns/a is paused: unpause it first"},
		{name: "soft-reboot pending", plan: PlanSoftReboot, vmi: testVMI(v1.Pending, nil), err: "VMI ns/a is not running (phase Pending)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			patch, err := tc.plan(tc.vmi, now)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(patch) != fmt.Sprint(tc.patch) {
				t.Errorf("patch %v, want %v", patch, tc.patch)
			}
		})
	}
}

// The merge patch a pause sends: the annotation, and the UID (so that it
// fails on a new VMI of the same name).
func TestVMIRequestPatch(t *testing.T) {
	cs := fake.NewSimpleClientset(testVMI(v1.Running, nil))
	var patches []string
	cs.PrependReactor("patch", "virtualmachineinstances", func(a k8stesting.Action) (bool, runtime.Object, error) {
		patches = append(patches, string(a.(k8stesting.PatchAction).GetPatch()))
		return false, nil, nil
	})
	h := &Handler{Kemu: cs}
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPut, subresources.Pause.Path("ns", "a"), nil).WithContext(context.Background())
	h.vmiRequest(w, r, subresources.Pause, "ns", "a")
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if len(patches) != 1 || patches[0] != `{"metadata":{"annotations":{"kemu.dev/paused":"true"},"uid":"uid-1"}}` {
		t.Errorf("patches %q", patches)
	}
	vmi, _ := cs.KemuV1alpha1().VirtualMachineInstances("ns").Get(context.Background(), "a", metav1.GetOptions{})
	if vmi.Annotations[v1.VMIPausedAnnotation] != "true" {
		t.Errorf("annotations %v", vmi.Annotations)
	}
}
