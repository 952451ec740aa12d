package vmi

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/kube/cdi"
)

// claimInput is what the readiness rules read of one volume's claim.
type claimInput struct {
	volume, claim string
	// dataVolume: a dataVolume volume (else persistentVolumeClaim or
	// ephemeral).
	dataVolume bool
	// pvc is the claim, nil when not found.
	pvc *corev1.PersistentVolumeClaim
	// dv is the DataVolume of the claim (the one controlling the PVC, else
	// the dataVolume volume's), nil when none is found or CDI is not
	// installed.
	dv *cdi.DataVolume
	// wffcClass: the PVC's storage class binds WaitForFirstConsumer.
	wffcClass bool
}

// readiness is the decision on a pending VMI's claims.
type readiness struct {
	// ready: the launcher Pod may be created (every claim ready, or
	// waiting for its first consumer: the Pod is that consumer).
	ready bool
	// dataVolumes: the DataVolumesReady condition applies (a dataVolume
	// volume, or a claim a DataVolume controls).
	dataVolumes bool
	// failed is a Failed DataVolume's message.
	failed string
	// missing says which claim was not found.
	missing string
	// waiting says what else is not ready.
	waiting []string
}

// pvcOwnedByDataVolume returns the name of the DataVolume controlling pvc.
func pvcOwnedByDataVolume(pvc *corev1.PersistentVolumeClaim) (string, bool) {
	if ref := metav1.GetControllerOf(pvc); ref != nil && ref.Kind == cdi.Kind {
		return ref.Name, true
	}
	return "", false
}

// decideClaims applies KubeVirt's rules (its virt-controller's
// areDataVolumesReady with CDI's IsSucceededOrPendingPopulation and
// IsWaitForFirstConsumerBeforePopulating) when CDI is installed: a claim
// must exist; one a DataVolume controls is ready when the DataVolume
// Succeeded or is PendingPopulation, and lets the Pod be created when the
// DataVolume waits for its first consumer; any other claim is taken as
// populated. A Failed DataVolume fails the VMI. Without CDI, a dataVolume
// volume's claim must be Bound, or Pending on a WaitForFirstConsumer
// storage class; persistentVolumeClaim volumes only need to exist.
func decideClaims(cdiInstalled bool, claims []claimInput) readiness {
	var r readiness
	for _, c := range claims {
		owner, owned := "", false
		if c.pvc != nil {
			owner, owned = pvcOwnedByDataVolume(c.pvc)
		}
		if c.dataVolume || (cdiInstalled && owned) {
			r.dataVolumes = true
		}
		if cdiInstalled && c.dv != nil && c.dv.Phase == cdi.PhaseFailed {
			if r.failed == "" {
				r.failed = fmt.Sprintf("volume %s: %s", c.volume, c.dv.FailureMessage())
			}
			continue
		}
		if c.pvc == nil {
			if r.missing == "" {
				r.missing = fmt.Sprintf("PersistentVolumeClaim %q (volume %q) not found", c.claim, c.volume)
				if c.dataVolume && cdiInstalled {
					r.missing += ", waiting for it to appear"
				}
			}
			continue
		}
		switch {
		case cdiInstalled && owned:
			switch {
			case c.dv == nil:
				r.waiting = append(r.waiting, fmt.Sprintf("DataVolume %s (volume %s) not found", owner, c.volume))
			case c.dv.Phase == cdi.PhaseSucceeded, c.dv.Phase == cdi.PhasePendingPopulation,
				c.dv.Phase == cdi.PhaseWaitForFirstConsumer:
			default:
				r.waiting = append(r.waiting, dvProgress(c.volume, c.dv))
			}
		case cdiInstalled, !c.dataVolume:
			// Not a DataVolume's: KubeVirt takes it as populated.
		case c.pvc.Status.Phase == corev1.ClaimBound:
		case c.pvc.Status.Phase == corev1.ClaimPending && c.wffcClass:
		default:
			phase := string(c.pvc.Status.Phase)
			if phase == "" {
				phase = string(corev1.ClaimPending)
			}
			r.waiting = append(r.waiting, fmt.Sprintf("PersistentVolumeClaim %s (volume %s) is %s", c.claim, c.volume, phase))
		}
	}
	r.ready = r.failed == "" && r.missing == "" && len(r.waiting) == 0
	return r
}

func dvProgress(volume string, dv *cdi.DataVolume) string {
	phase := string(dv.Phase)
	if phase == "" {
		phase = "without a phase yet"
	}
	msg := fmt.Sprintf("DataVolume %s (volume %s) is %s", dv.Name, volume, phase)
	if dv.Progress != "" && dv.Progress != "N/A" {
		msg += " (" + dv.Progress + ")"
	}
	return msg
}

// condDataVolumesReady is the DataVolumesReady condition of r.
func condDataVolumesReady(r readiness) v1.VirtualMachineInstanceCondition {
	if r.ready {
		return v1.VirtualMachineInstanceCondition{Type: v1.VirtualMachineInstanceDataVolumesReady,
			Status: corev1.ConditionTrue, Reason: v1.VirtualMachineInstanceReasonAllDVsReady,
			Message: "All of the VMI's DVs are bound and ready"}
	}
	var why []string
	for _, s := range []string{r.failed, r.missing} {
		if s != "" {
			why = append(why, s)
		}
	}
	why = append(why, r.waiting...)
	return v1.VirtualMachineInstanceCondition{Type: v1.VirtualMachineInstanceDataVolumesReady,
		Status: corev1.ConditionFalse, Reason: v1.VirtualMachineInstanceReasonNotAllDVsReady,
		Message: "Not all of the VMI's DVs are ready: " + strings.Join(why, "; ")}
}

// claimInputs reads the VMI's claims, their DataVolumes (when CDI is
// installed) and, for a dataVolume volume's Pending claim without CDI,
// its storage class's binding mode.
func (c *Controller) claimInputs(ctx context.Context, vmi *v1.VirtualMachineInstance, cdiInstalled bool) ([]claimInput, error) {
	var out []claimInput
	for i := range vmi.Spec.Volumes {
		vol := &vmi.Spec.Volumes[i]
		claim, _, ok := v1.VolumeClaim(vol)
		if !ok {
			continue
		}
		in := claimInput{volume: vol.Name, claim: claim, dataVolume: vol.DataVolume != nil}
		pvc, err := c.pvcLister.PersistentVolumeClaims(vmi.Namespace).Get(claim)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, err
		default:
			in.pvc = pvc
		}
		if cdiInstalled {
			dvName := ""
			if in.pvc != nil {
				dvName, _ = pvcOwnedByDataVolume(in.pvc)
			}
			if dvName == "" && in.dataVolume {
				dvName = claim
			}
			if dvName != "" {
				dv, found, err := c.cfg.DataVolumes.Get(vmi.Namespace, dvName)
				if err != nil {
					return nil, fmt.Errorf("reading DataVolume %s/%s: %w", vmi.Namespace, dvName, err)
				}
				if found {
					in.dv = dv
				}
			}
		} else if in.dataVolume && in.pvc != nil && in.pvc.Status.Phase != corev1.ClaimBound {
			if in.wffcClass, err = c.bindsOnFirstConsumer(ctx, in.pvc); err != nil {
				return nil, err
			}
		}
		out = append(out, in)
	}
	return out, nil
}

// bindsOnFirstConsumer says whether pvc's storage class has
// volumeBindingMode WaitForFirstConsumer (no class, or one not found: no).
func (c *Controller) bindsOnFirstConsumer(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (bool, error) {
	name := ""
	if pvc.Spec.StorageClassName != nil {
		name = *pvc.Spec.StorageClassName
	}
	if name == "" {
		return false, nil
	}
	sc, err := c.cfg.KubeClient.StorageV1().StorageClasses().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading StorageClass %s of PersistentVolumeClaim %s/%s: %w", name, pvc.Namespace, pvc.Name, err)
	}
	return sc.VolumeBindingMode != nil && *sc.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer, nil
}

// cdiState is CDI's installation as the controller acts on it: without a
// Watcher, never installed.
func (c *Controller) cdiState() (installed, ready bool) {
	if c.cfg.DataVolumes == nil {
		return false, true
	}
	return c.cfg.DataVolumes.State()
}

// enqueueClaimUsers queues the pending VMIs of obj's namespace that use a
// claim (or DataVolume) of obj's name: a PVC or DataVolume event.
func (c *Controller) enqueueClaimUsers(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	m, err := metaOf(obj)
	if err != nil {
		return
	}
	vmis, err := c.vmiLister.VirtualMachineInstances(m.GetNamespace()).List(labelsEverything)
	if err != nil {
		return
	}
	for _, vmi := range vmis {
		if vmi.Status.Phase != v1.VmPhaseUnset && vmi.Status.Phase != v1.Pending {
			continue
		}
		if v1.HasPersistentTPM(&vmi.Spec) && launcherpod.BackendStoragePVCName(vmi.Name) == m.GetName() {
			c.enqueue(vmi) // its backend storage claim
			continue
		}
		for i := range vmi.Spec.Volumes {
			if claim, _, ok := v1.VolumeClaim(&vmi.Spec.Volumes[i]); ok && claim == m.GetName() {
				c.enqueue(vmi)
				break
			}
		}
	}
}

// enqueuePending queues every pending VMI (CDI came or went).
func (c *Controller) enqueuePending() {
	vmis, err := c.vmiLister.List(labelsEverything)
	if err != nil {
		return
	}
	for _, vmi := range vmis {
		if vmi.Status.Phase == v1.VmPhaseUnset || vmi.Status.Phase == v1.Pending {
			c.enqueue(vmi)
		}
	}
}

func metaOf(obj any) (metav1.Object, error) {
	switch o := obj.(type) {
	case *corev1.PersistentVolumeClaim:
		return o, nil
	case *unstructured.Unstructured:
		return o, nil
	}
	return nil, fmt.Errorf("not a PVC or DataVolume: %T", obj)
}

var labelsEverything = labels.Everything()
