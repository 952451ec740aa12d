package subresource

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/api/subresources"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/kube/vmistatus"
)

// vmiRequest records pause, unpause or softreboot in the VMI's
// annotations for the node agent; the reply says it was accepted, and the
// VMI's Paused condition or kemu.dev/soft-reboot-done says when it is done.
func (h *Handler) vmiRequest(w http.ResponseWriter, r *http.Request, verb subresources.Verb, ns, name string) {
	ctx := r.Context()
	var dryRun bool
	var err error
	switch verb {
	case subresources.Pause:
		var o subresources.PauseOptions
		dryRun, err = readOptions(r, &o, func() []string { return o.DryRun })
	case subresources.Unpause:
		var o subresources.UnpauseOptions
		dryRun, err = readOptions(r, &o, func() []string { return o.DryRun })
	default:
		var o subresources.SoftRebootOptions
		dryRun, err = readOptions(r, &o, func() []string { return o.DryRun })
	}
	if err != nil {
		writeError(w, err)
		return
	}
	vmis := h.Kemu.KemuV1alpha1().VirtualMachineInstances(ns)
	vmi, err := vmis.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		writeError(w, apiError(ctx, "reading the VMI", err))
		return
	}
	var annotations map[string]any
	switch verb {
	case subresources.Pause:
		annotations, err = PlanPause(vmi)
	case subresources.Unpause:
		annotations, err = PlanUnpause(vmi)
	default:
		annotations, err = PlanSoftReboot(vmi, time.Now())
	}
	if err != nil {
		writeError(w, apierrors.NewConflict(vmiResource, name, err))
		return
	}
	// The UID makes the patch fail (Conflict) on a new VMI of the same name.
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": vmi.UID, "annotations": annotations}})
	if err != nil {
		writeError(w, err)
		return
	}
	opts := metav1.PatchOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	if _, err := vmis.Patch(ctx, name, types.MergePatchType, patch, opts); err != nil {
		writeError(w, apiError(ctx, "recording the "+verb.Name+" request", err))
		return
	}
	klog.FromContext(ctx).Info("Recorded the request", "dryRun", dryRun)
	w.WriteHeader(http.StatusOK)
}

// checkRunning refuses a VMI that does not run: virt-api's test for pause
// and soft reboot (phase Running), and not being deleted.
func checkRunning(vmi *v1.VirtualMachineInstance) error {
	ref := ref(vmi)
	if vmi.DeletionTimestamp != nil {
		return fmt.Errorf("%s is stopping", ref)
	}
	if vmi.Status.Phase != v1.Running {
		phase := string(vmi.Status.Phase)
		if phase == "" {
			phase = "none yet"
		}
		return fmt.Errorf("%s is not running (phase %s)", ref, phase)
	}
	return nil
}

func ref(vmi *v1.VirtualMachineInstance) string {
	return fmt.Sprintf("VMI %s/%s", vmi.Namespace, vmi.Name)
}

// IsPaused says whether the VMI's Paused condition is True.
func IsPaused(vmi *v1.VirtualMachineInstance) bool {
	return vmistatus.HasCondition(vmi, v1.VirtualMachineInstancePaused, corev1.ConditionTrue, "")
}

// PlanPause checks that vmi may be paused and returns the annotations to
// merge.
func PlanPause(vmi *v1.VirtualMachineInstance) (map[string]any, error) {
	if err := checkRunning(vmi); err != nil {
		return nil, err
	}
	if IsPaused(vmi) {
		return nil, fmt.Errorf("%s is already paused", ref(vmi))
	}
	return map[string]any{v1.VMIPausedAnnotation: "true"}, nil
}

// PlanUnpause checks that vmi is paused, or asked to be, and returns the
// annotations to merge (a nil value removes one).
func PlanUnpause(vmi *v1.VirtualMachineInstance) (map[string]any, error) {
	if err := checkRunning(vmi); err != nil {
		return nil, err
	}
	requested := vmi.Annotations[v1.VMIPausedAnnotation] == "true"
	if !IsPaused(vmi) && !requested {
		return nil, fmt.Errorf("%s is not paused", ref(vmi))
	}
	// Not paused yet but asked to be: withdrawing the request is the unpause.
	var value any // remove the annotation
	if _, ok := vmi.Annotations[v1.VMIPausedAnnotation]; !ok {
		// Paused without it (startStrategy Paused): an explicit "false"
		// changes the object, so the node agent sees a request.
		value = "false"
	}
	return map[string]any{v1.VMIPausedAnnotation: value}, nil
}

// PlanSoftReboot checks that vmi runs unpaused and returns the annotation
// asking for one more soft reboot: a new value per request, which the node
// agent copies to kemu.dev/soft-reboot-done once it rebooted the guest.
func PlanSoftReboot(vmi *v1.VirtualMachineInstance, now time.Time) (map[string]any, error) {
	if err := checkRunning(vmi); err != nil {
		return nil, err
	}
	if IsPaused(vmi) {
		return nil, fmt.Errorf("%s is paused: unpause it first", ref(vmi))
	}
	return map[string]any{v1.VMISoftRebootAnnotation: now.UTC().Format(time.RFC3339Nano)}, nil
}
