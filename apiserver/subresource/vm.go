package subresource

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	"github.com/kemu-dev/kemu/api/subresources"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// vmRequest serves start, stop and restart of a VM, as KubeVirt's virt-api
// does: through the VM's runStrategy, or state change requests in its
// status that the VM controller carries out.
func (h *Handler) vmRequest(w http.ResponseWriter, r *http.Request, verb subresources.Verb, ns, name string) {
	ctx := r.Context()
	var dryRun bool
	var err error
	switch verb {
	case subresources.Start:
		var o subresources.StartOptions
		dryRun, err = readOptions(r, &o, func() []string { return o.DryRun })
		if err == nil && o.Paused {
			err = apierrors.NewBadRequest(field.NotSupported(field.NewPath("paused"), true, []string{"false"}).Error() +
				": kemu does not start a VM paused yet")
		}
	case subresources.Stop:
		var o subresources.StopOptions
		dryRun, err = readOptions(r, &o, func() []string { return o.DryRun })
		if err == nil && o.GracePeriod != nil {
			err = apierrors.NewBadRequest(field.Forbidden(field.NewPath("gracePeriod"),
				"kemu stops a VM with its VMI's terminationGracePeriodSeconds").Error())
		}
	default:
		var o subresources.RestartOptions
		dryRun, err = readOptions(r, &o, func() []string { return o.DryRun })
		if err == nil && o.GracePeriodSeconds != nil {
			err = apierrors.NewBadRequest(field.Forbidden(field.NewPath("gracePeriodSeconds"),
				"kemu restarts a VM with its VMI's terminationGracePeriodSeconds").Error())
		}
	}
	if err != nil {
		writeError(w, err)
		return
	}
	op := vmOp{cs: h.Kemu, dryRun: dryRun}
	switch verb {
	case subresources.Start:
		err = op.start(ctx, ns, name)
	case subresources.Stop:
		err = op.stop(ctx, ns, name)
	default:
		err = op.restart(ctx, ns, name)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	klog.FromContext(ctx).Info("Recorded the request", "dryRun", dryRun)
	w.WriteHeader(http.StatusOK)
}

// vmOp carries out one VM verb.
type vmOp struct {
	cs     versioned.Interface
	dryRun bool
}

func (o vmOp) dryRunOpt() []string {
	if o.dryRun {
		return []string{metav1.DryRunAll}
	}
	return nil
}

// vmState is a VM, its run strategy and its VMI (nil when it has none).
type vmState struct {
	vm  *v1.VirtualMachine
	rs  v1.VirtualMachineRunStrategy
	vmi *v1.VirtualMachineInstance
	ref string // "VM ns/name", for messages
}

// refuse is a request the VM's state does not allow (409, as KubeVirt).
func (s *vmState) refuse(format string, args ...any) error {
	return apierrors.NewConflict(vmResource, s.vm.Name, fmt.Errorf(s.ref+" "+format, args...))
}

func (o vmOp) state(ctx context.Context, ns, name string) (*vmState, error) {
	s := &vmState{ref: fmt.Sprintf("VM %s/%s", ns, name)}
	vm, err := o.cs.KemuV1alpha1().VirtualMachines(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, apiError(ctx, "reading the VM", err)
	}
	s.vm = vm
	d := vm.DeepCopy()
	v1.SetVirtualMachineDefaults(d)
	s.rs = *d.Spec.RunStrategy
	vmi, err := o.cs.KemuV1alpha1().VirtualMachineInstances(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, apiError(ctx, "reading the VM's VMI", err)
	default:
		s.vmi = vmi
	}
	return s, nil
}

// running says whether the VMI exists and has not ended (KubeVirt's test:
// not Succeeded, Failed, Unknown or without a phase yet).
func (s *vmState) running() bool {
	return s.vmi != nil && !s.vmi.Status.Phase.IsFinal() && s.vmi.Status.Phase != v1.Unknown &&
		s.vmi.Status.Phase != v1.VmPhaseUnset
}

func (s *vmState) alive() bool { return s.vmi != nil && !s.vmi.Status.Phase.IsFinal() }

func (o vmOp) start(ctx context.Context, ns, name string) error {
	s, err := o.state(ctx, ns, name)
	if err != nil {
		return err
	}
	if s.running() {
		return s.refuse("is already running (VMI phase %s)", s.vmi.Status.Phase)
	}
	switch s.rs {
	case v1.RunStrategyHalted:
		return o.setRunStrategy(ctx, s, v1.RunStrategyAlways)
	case v1.RunStrategyManual, v1.RunStrategyRerunOnFailure:
		if s.rs == v1.RunStrategyRerunOnFailure && s.vmi != nil && s.vmi.Status.Phase == v1.Failed {
			return s.refuse("has runStrategy RerunOnFailure, which restarts a failed VMI by itself")
		}
		reqs := []v1.VirtualMachineStateChangeRequest{{Action: v1.StartRequest}}
		if s.vmi != nil && s.vmi.Status.Phase.IsFinal() {
			// The ended VMI goes first.
			uid := string(s.vmi.UID)
			reqs = append([]v1.VirtualMachineStateChangeRequest{{Action: v1.StopRequest, UID: &uid}}, reqs...)
		}
		return o.addStateChangeRequests(ctx, s, reqs)
	default: // Always, Once
		return s.refuse("has runStrategy %s: the VM controller starts it by itself, manual start requests are not supported", s.rs)
	}
}

func (o vmOp) stop(ctx context.Context, ns, name string) error {
	s, err := o.state(ctx, ns, name)
	if err != nil {
		return err
	}
	switch s.rs {
	case v1.RunStrategyHalted, v1.RunStrategyManual:
		// Halted already: the controller is deleting the VMI; help it.
		if !s.alive() {
			return s.refuse("is not running")
		}
		return o.deleteVMI(ctx, s)
	default: // Always, RerunOnFailure, Once
		return o.setRunStrategy(ctx, s, v1.RunStrategyHalted)
	}
}

func (o vmOp) restart(ctx context.Context, ns, name string) error {
	s, err := o.state(ctx, ns, name)
	if err != nil {
		return err
	}
	switch s.rs {
	case v1.RunStrategyHalted:
		return s.refuse("is stopped (runStrategy Halted): start it first")
	case v1.RunStrategyOnce:
		return s.refuse("has runStrategy Once, which runs its VMI only once: restart is not supported")
	}
	if !s.alive() {
		return s.refuse("is not running: start it first")
	}
	if s.vmi.DeletionTimestamp != nil {
		return s.refuse("is stopping already")
	}
	uid := string(s.vmi.UID)
	if err := o.addStateChangeRequests(ctx, s, []v1.VirtualMachineStateChangeRequest{
		{Action: v1.StopRequest, UID: &uid}, {Action: v1.StartRequest}}); err != nil {
		return err
	}
	return o.deleteVMI(ctx, s)
}

// setRunStrategy patches spec.runStrategy (dropping the deprecated
// spec.running), only on the VM as read.
func (o vmOp) setRunStrategy(ctx context.Context, s *vmState, rs v1.VirtualMachineRunStrategy) error {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": s.vm.ResourceVersion},
		"spec":     map[string]any{"runStrategy": rs, "running": nil},
	})
	if err != nil {
		return err
	}
	_, err = o.cs.KemuV1alpha1().VirtualMachines(s.vm.Namespace).Patch(ctx, s.vm.Name, types.MergePatchType, patch,
		metav1.PatchOptions{DryRun: o.dryRunOpt()})
	if err != nil {
		return apiError(ctx, fmt.Sprintf("setting runStrategy %s", rs), err)
	}
	return nil
}

// addStateChangeRequests queues requests for the VM controller in the VM's
// status (as KubeVirt's virt-api does), refusing when some are pending.
func (o vmOp) addStateChangeRequests(ctx context.Context, s *vmState, reqs []v1.VirtualMachineStateChangeRequest) error {
	if pending := s.vm.Status.StateChangeRequests; len(pending) > 0 {
		return s.refuse("has a state change pending (%s): try again once the VM controller handled it", pending[0].Action)
	}
	upd := s.vm.DeepCopy()
	upd.Status.StateChangeRequests = reqs
	_, err := o.cs.KemuV1alpha1().VirtualMachines(upd.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{DryRun: o.dryRunOpt()})
	if err != nil {
		return apiError(ctx, fmt.Sprintf("requesting %s", reqs[len(reqs)-1].Action), err)
	}
	return nil
}

// deleteVMI deletes the VMI read, not a newer one of the same name.
func (o vmOp) deleteVMI(ctx context.Context, s *vmState) error {
	err := o.cs.KemuV1alpha1().VirtualMachineInstances(s.vmi.Namespace).Delete(ctx, s.vmi.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &s.vmi.UID}, DryRun: o.dryRunOpt()})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return apiError(ctx, "deleting the VMI", err)
	}
	return nil
}
