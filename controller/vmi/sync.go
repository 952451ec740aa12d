package vmi

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/api/validation"
	"github.com/kemu-dev/kemu/controller/metrics"
	"github.com/kemu-dev/kemu/controller/template"
)

// Finalizer (v1.VMIFinalizer): kemu-api's admission adds it to a new VMI,
// else the controller before creating the Pod; the controller removes it
// once the VMI is deleted (or final) and no Pod of it runs.
const Finalizer = v1.VMIFinalizer

// Delays of re-checks that no event triggers.
const (
	// pvcRetry: a safety re-check while a VMI waits for a missing PVC (its
	// events requeue the VMI).
	pvcRetry = 10 * time.Second
	// dataVolumeRetry: a safety re-check while a VMI waits for DataVolumes
	// or claims to bind (their events requeue it).
	dataVolumeRetry = 30 * time.Second
	// cdiRetry: a re-check while CDI's installation is not known yet.
	cdiRetry = time.Second
	// expectationsRetry: a safety re-check while a Pod creation is unobserved.
	expectationsRetry = 30 * time.Second
)

type result struct{ requeueAfter time.Duration }

// sync reconciles one VMI. It is idempotent: every step reads the caches and
// does only what is missing.
func (c *Controller) sync(ctx context.Context, key string) (result, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return result{}, nil
	}
	vmi, err := c.vmiLister.VirtualMachineInstances(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.expectations.Delete(key)
		c.written.Forget(key)
		return result{}, nil
	}
	if err != nil {
		return result{}, err
	}
	if c.written.Stale(key, vmi.ResourceVersion) {
		// Our last write is not in the cache yet; its event requeues us.
		return result{requeueAfter: expectationsRetry}, nil
	}
	if !c.expectations.Satisfied(key) {
		// A Pod we created (or deleted) is not in the cache yet: acting on
		// the cache now could create a second Pod. Its event requeues us.
		klog.FromContext(ctx).V(4).Info("Waiting for the Pod cache", "vmi", key)
		return result{requeueAfter: expectationsRetry}, nil
	}
	pods, err := c.podsOf(vmi)
	if err != nil {
		return result{}, err
	}
	switch {
	case vmi.DeletionTimestamp != nil:
		return result{}, c.syncDeleting(ctx, key, vmi, pods)
	case vmi.Status.Phase.IsFinal():
		return result{}, c.syncFinal(ctx, key, vmi, pods)
	case vmi.Status.Phase == v1.VmPhaseUnset || vmi.Status.Phase == v1.Pending:
		return c.syncPending(ctx, key, vmi, currentPod(vmi, pods))
	default:
		return result{}, c.syncStarted(ctx, vmi, currentPod(vmi, pods))
	}
}

// podsOf lists the launcher Pods the VMI controls.
func (c *Controller) podsOf(vmi *v1.VirtualMachineInstance) ([]*corev1.Pod, error) {
	sel := labels.SelectorFromSet(labels.Set{launcherpod.CreatedByLabel: string(vmi.UID)})
	all, err := c.podLister.Pods(vmi.Namespace).List(sel)
	if err != nil {
		return nil, err
	}
	var pods []*corev1.Pod
	for _, p := range all {
		if ref := metav1.GetControllerOf(p); ref != nil && ref.UID == vmi.UID {
			pods = append(pods, p)
		}
	}
	return pods, nil
}

// currentPod is the Pod status.launcherPod names, else the only one that
// is no migration's target (issue 17: a target Pod becomes the launcher
// Pod only when the migration controller names it).
func currentPod(vmi *v1.VirtualMachineInstance, pods []*corev1.Pod) *corev1.Pod {
	for _, p := range pods {
		if p.Name == vmi.Status.LauncherPod {
			return p
		}
	}
	if vmi.Status.LauncherPod == "" {
		for _, p := range pods {
			if !isMigrationTarget(p) {
				return p
			}
		}
	}
	return nil
}

func (c *Controller) syncPending(ctx context.Context, key string, vmi *v1.VirtualMachineInstance, pod *corev1.Pod) (result, error) {
	defaulted := vmi.DeepCopy()
	v1.SetVirtualMachineInstanceDefaults(defaulted)
	errs := validation.ValidateVirtualMachineInstance(defaulted)
	// Cluster policy: hostDisks only beneath the directories kemu-config
	// allows; images from a registry (no local oci: references).
	errs = append(errs, validation.ValidateHostDisks(defaulted, c.cfg.Template.HostDiskDirs())...)
	errs = append(errs, validation.ValidateForCluster(defaulted)...)
	invalid := func(errs field.ErrorList) error {
		msg := errs.ToAggregate().Error()
		return c.updateStatus(ctx, vmi, "invalid spec: "+msg, func(vmi *v1.VirtualMachineInstance) {
			if vmi.Status.Phase.IsFinal() {
				return
			}
			setPhase(vmi, v1.Failed)
			vmi.Status.Reason = ReasonInvalidSpec
			setCondition(vmi, condSynchronized(corev1.ConditionFalse, ReasonInvalidSpec, msg))
		})
	}
	if len(errs) > 0 {
		return result{}, invalid(errs)
	}
	if pod != nil {
		// Created by an earlier run whose status write did not happen.
		return result{}, c.toScheduling(ctx, vmi, pod.Name, "launcher Pod "+pod.Name+" exists")
	}
	vmi, err := c.ensureFinalizer(ctx, vmi)
	if err != nil {
		return result{}, err
	}
	in := template.Input{VMI: defaulted, KVM: c.useKVM(defaulted), PVCBlock: map[string]bool{}}
	r, res, err := c.claimsReady(ctx, vmi, defaulted)
	if err != nil || !r.ready {
		return res, err
	}
	bs, ready, res, err := c.backendStorage(ctx, vmi, defaulted)
	if err != nil || !ready {
		return res, err
	}
	in.BackendStorage = bs
	for _, vol := range defaulted.Spec.Volumes {
		claim, _, ok := v1.VolumeClaim(&vol)
		if !ok {
			continue
		}
		pvc, err := c.pvcLister.PersistentVolumeClaims(vmi.Namespace).Get(claim)
		if err != nil {
			return result{}, err
		}
		in.PVCBlock[claim] = pvc.Spec.VolumeMode != nil && *pvc.Spec.VolumeMode == corev1.PersistentVolumeBlock
	}
	// A claim's volume mode is known only here (and it cannot change).
	if errs := validation.ValidateLUNClaims(&defaulted.Spec, in.PVCBlock); len(errs) > 0 {
		return result{}, invalid(errs)
	}
	dvReady := func(vmi *v1.VirtualMachineInstance) {
		if r.dataVolumes {
			setCondition(vmi, condDataVolumesReady(r))
		}
	}
	want, err := c.cfg.Template.Render(in)
	if err != nil {
		return result{}, err
	}
	c.expectations.ExpectCreations(key, 1)
	created, err := c.cfg.KubeClient.CoreV1().Pods(vmi.Namespace).Create(ctx, want, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		// Ours (the name derives from the VMI's UID): the cache lags.
		c.expectations.CreationObserved(key)
		metrics.PodCreations.WithLabelValues("exists").Inc()
		return result{}, c.toScheduling(ctx, vmi, want.Name, "launcher Pod "+want.Name+" exists", dvReady)
	case err != nil:
		c.expectations.CreationObserved(key)
		metrics.PodCreations.WithLabelValues("error").Inc()
		msg := fmt.Sprintf("creating launcher Pod %s: %v", want.Name, err)
		c.cfg.Recorder.Event(vmi, corev1.EventTypeWarning, ReasonFailedCreate, msg)
		if serr := c.updateStatus(ctx, vmi, msg, func(vmi *v1.VirtualMachineInstance) {
			if vmi.Status.Phase == v1.VmPhaseUnset {
				setPhase(vmi, v1.Pending)
			}
			setCondition(vmi, condSynchronized(corev1.ConditionFalse, ReasonFailedCreate, msg))
		}); serr != nil {
			klog.FromContext(ctx).Error(serr, "Recording the failed Pod creation", "vmi", key)
		}
		return result{}, fmt.Errorf("%s", msg)
	}
	metrics.PodCreations.WithLabelValues("success").Inc()
	return result{}, c.toScheduling(ctx, vmi, created.Name, "created launcher Pod "+created.Name, dvReady)
}

// claimsReady decides whether the VMI's claims and DataVolumes let its
// launcher Pod be created (decideClaims); when not, it records why on the
// VMI and says when to look again (events of PVCs and DataVolumes requeue
// it sooner).
func (c *Controller) claimsReady(ctx context.Context, vmi, defaulted *v1.VirtualMachineInstance) (readiness, result, error) {
	hasClaims := false
	for i := range defaulted.Spec.Volumes {
		if _, _, ok := v1.VolumeClaim(&defaulted.Spec.Volumes[i]); ok {
			hasClaims = true
		}
	}
	if !hasClaims {
		return readiness{ready: true}, result{}, nil
	}
	installed, known := c.cdiState()
	if !known {
		// The first discovery, or a new DataVolume cache: OnChange requeues.
		klog.FromContext(ctx).V(4).Info("Waiting to learn whether CDI is installed", "vmi", klog.KObj(vmi))
		return readiness{}, result{requeueAfter: cdiRetry}, nil
	}
	claims, err := c.claimInputs(ctx, defaulted, installed)
	if err != nil {
		return readiness{}, result{}, err
	}
	r := decideClaims(installed, claims)
	switch {
	case r.ready:
		return r, result{}, nil
	case r.failed != "":
		msg := r.failed
		c.cfg.Recorder.Event(vmi, corev1.EventTypeWarning, ReasonFailedDataVolumeImport, msg)
		return r, result{}, c.updateStatus(ctx, vmi, msg, func(vmi *v1.VirtualMachineInstance) {
			if vmi.Status.Phase.IsFinal() {
				return
			}
			setPhase(vmi, v1.Failed)
			vmi.Status.Reason = ReasonFailedDataVolumeImport
			setCondition(vmi, condSynchronized(corev1.ConditionFalse, ReasonFailedDataVolumeImport, msg))
			setCondition(vmi, condDataVolumesReady(r))
		})
	case r.missing != "":
		msg := r.missing
		return r, result{requeueAfter: pvcRetry}, c.updateStatus(ctx, vmi, msg, func(vmi *v1.VirtualMachineInstance) {
			if vmi.Status.Phase == v1.VmPhaseUnset {
				setPhase(vmi, v1.Pending)
			}
			setCondition(vmi, condSynchronized(corev1.ConditionFalse, ReasonPVCNotFound, msg))
			if r.dataVolumes {
				setCondition(vmi, condDataVolumesReady(r))
			}
		})
	}
	klog.FromContext(ctx).V(3).Info("Delaying the launcher Pod while DataVolumes populate or claims bind",
		"vmi", klog.KObj(vmi), "waiting", r.waiting)
	return r, result{requeueAfter: dataVolumeRetry}, c.updateStatus(ctx, vmi, "waiting for DataVolumes", func(vmi *v1.VirtualMachineInstance) {
		if vmi.Status.Phase == v1.VmPhaseUnset {
			setPhase(vmi, v1.Pending)
		}
		removeOwnSynchronized(vmi)
		setCondition(vmi, condDataVolumesReady(r))
	})
}

// toScheduling records the Pod and moves Pending (or unset) to Scheduling,
// in one status write.
func (c *Controller) toScheduling(ctx context.Context, vmi *v1.VirtualMachineInstance, podName, why string,
	also ...func(*v1.VirtualMachineInstance)) error {
	return c.updateStatus(ctx, vmi, why, func(vmi *v1.VirtualMachineInstance) {
		if vmi.Status.Phase != v1.VmPhaseUnset && vmi.Status.Phase != v1.Pending {
			return
		}
		for _, f := range also {
			f(vmi)
		}
		if vmi.Status.Phase == v1.VmPhaseUnset {
			setPhase(vmi, v1.Pending)
		}
		setPhase(vmi, v1.Scheduling)
		vmi.Status.LauncherPod = podName
		removeOwnSynchronized(vmi)
	})
}

// syncStarted follows the Pod of a VMI in Scheduling, Scheduled, Running or
// Unknown.
func (c *Controller) syncStarted(ctx context.Context, vmi *v1.VirtualMachineInstance, pod *corev1.Pod) error {
	if pod == nil {
		if migratedAway(vmi, vmi.Status.LauncherPod) {
			return nil // issue 17: the VM left the Pod; the migration controller names the next
		}
		// A Pod that failed or was disrupted and is already gone: its
		// reason from the delete event, else PodVanished.
		if reason, msg, ok := c.ended.get(vmi.Namespace, vmi.Status.LauncherPod); ok {
			if err := c.fail(ctx, vmi, vmi.Status.LauncherPod, reason, msg); err != nil {
				return err
			}
			c.ended.forget(vmi.Namespace, vmi.Status.LauncherPod)
			return nil
		}
		msg := fmt.Sprintf("launcher Pod %q is gone", vmi.Status.LauncherPod)
		return c.fail(ctx, vmi, vmi.Status.LauncherPod, ReasonPodVanished, msg)
	}
	if (pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded) && migratedAway(vmi, pod.Name) {
		return nil // issue 17: a source Pod that ends because its VM migrated never ends the VMI
	}
	switch pod.Status.Phase {
	case corev1.PodFailed:
		reason, msg := vmiPodFailure(vmi, pod)
		return c.fail(ctx, vmi, pod.Name, reason, msg)
	case corev1.PodSucceeded:
		// The launcher exits 0 only when the guest powered off by itself or
		// on a deletion (a signal alone exits launcherpod.ExitStopped).
		return c.updateStatus(ctx, vmi, "launcher Pod "+pod.Name+" completed: the guest powered off",
			func(vmi *v1.VirtualMachineInstance) {
				if vmi.Status.Phase.IsFinal() || migratedAway(vmi, pod.Name) {
					return
				}
				setPhase(vmi, v1.Succeeded)
				vmi.Status.Reason = ReasonPodSucceeded
			})
	}
	if p, ok := podStartFailure(pod); ok && p.permanent && vmi.Status.Phase != v1.Running {
		// The kubelet will never start it (an image reference it refuses):
		// fail now instead of waiting forever (syncFinal then deletes the
		// Pod).
		return c.fail(ctx, vmi, pod.Name, p.reason, p.msg)
	}
	why := "launcher Pod " + pod.Name + " bound to node " + pod.Spec.NodeName
	return c.updateStatus(ctx, vmi, why, func(vmi *v1.VirtualMachineInstance) {
		if vmi.Status.Phase.IsFinal() || migratedAway(vmi, pod.Name) {
			return // issue 17: (a fresh VMI after a conflict) the VM moved on
		}
		mirrorPodConditions(vmi, pod)
		if pod.Spec.NodeName == "" {
			return
		}
		if vmi.Status.Phase == v1.Scheduling {
			setPhase(vmi, v1.Scheduled)
			vmi.Status.NodeName = pod.Spec.NodeName
		}
		vmi.Status.LauncherPod = pod.Name
		if vmi.Status.ActivePods[pod.UID] != pod.Spec.NodeName {
			if vmi.Status.ActivePods == nil {
				vmi.Status.ActivePods = map[types.UID]string{}
			}
			vmi.Status.ActivePods[pod.UID] = pod.Spec.NodeName
		}
	})
}

// fail moves a VMI that is not final to Failed because of its launcher
// Pod podName — unless (on a fresh VMI after a conflict) the VM migrated
// away from that Pod (issue 17).
func (c *Controller) fail(ctx context.Context, vmi *v1.VirtualMachineInstance, podName, reason, msg string) error {
	return c.updateStatus(ctx, vmi, reason+": "+msg, func(vmi *v1.VirtualMachineInstance) {
		if vmi.Status.Phase.IsFinal() || migratedAway(vmi, podName) {
			return
		}
		setPhase(vmi, v1.Failed)
		vmi.Status.Reason = reason
		setCondition(vmi, condSynchronized(corev1.ConditionFalse, reason, msg))
	})
}

// syncDeleting deletes the VMI's Pods (with their grace period: the VMI's
// plus padding) and drops the finalizer once none is left.
func (c *Controller) syncDeleting(ctx context.Context, key string, vmi *v1.VirtualMachineInstance, pods []*corev1.Pod) error {
	if len(pods) == 0 {
		return c.removeFinalizer(ctx, vmi)
	}
	return c.deletePods(ctx, key, vmi, pods, "the VMI is being deleted")
}

// syncFinal stops Pods still running for a final VMI and drops the
// finalizer once none runs. Terminated Pods stay for their logs until the
// VMI is deleted (garbage collection through the owner reference).
func (c *Controller) syncFinal(ctx context.Context, key string, vmi *v1.VirtualMachineInstance, pods []*corev1.Pod) error {
	var live []*corev1.Pod
	for _, p := range pods {
		if p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
			live = append(live, p)
		}
	}
	if len(live) == 0 {
		return c.removeFinalizer(ctx, vmi)
	}
	return c.deletePods(ctx, key, vmi, live, "the VMI is "+string(vmi.Status.Phase))
}

func (c *Controller) deletePods(ctx context.Context, key string, vmi *v1.VirtualMachineInstance, pods []*corev1.Pod, why string) error {
	var todo []*corev1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp == nil {
			todo = append(todo, p)
		}
	}
	if len(todo) == 0 {
		return nil // waiting for the terminating Pods to go
	}
	uids := make([]types.UID, 0, len(todo))
	for _, p := range todo {
		uids = append(uids, p.UID)
	}
	c.expectations.ExpectDeletions(key, uids...)
	var errs []error
	for _, p := range todo {
		uid := p.UID
		err := c.cfg.KubeClient.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name,
			metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil {
			c.expectations.DeletionObserved(key, uid) // no delete event will come
			if !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				errs = append(errs, err)
				c.cfg.Recorder.Eventf(vmi, corev1.EventTypeWarning, ReasonFailedDelete, "Deleting launcher Pod %s: %v", p.Name, err)
			}
			continue
		}
		c.cfg.Recorder.Eventf(vmi, corev1.EventTypeNormal, ReasonSuccessfulDelete, "Deleted launcher Pod %s: %s", p.Name, why)
	}
	if len(errs) > 0 {
		return fmt.Errorf("deleting launcher Pods of %s: %v", key, errs)
	}
	return nil
}

// ensureFinalizer adds Finalizer (a merge patch carrying the
// resourceVersion: a stale cache conflicts instead of dropping a finalizer
// someone else added) and returns the patched VMI.
func (c *Controller) ensureFinalizer(ctx context.Context, vmi *v1.VirtualMachineInstance) (*v1.VirtualMachineInstance, error) {
	if slices.Contains(vmi.Finalizers, Finalizer) {
		return vmi, nil
	}
	return c.patchFinalizers(ctx, vmi, append(slices.Clone(vmi.Finalizers), Finalizer))
}

func (c *Controller) removeFinalizer(ctx context.Context, vmi *v1.VirtualMachineInstance) error {
	if !slices.Contains(vmi.Finalizers, Finalizer) {
		return nil
	}
	keep := slices.DeleteFunc(slices.Clone(vmi.Finalizers), func(f string) bool { return f == Finalizer })
	_, err := c.patchFinalizers(ctx, vmi, keep)
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func (c *Controller) patchFinalizers(ctx context.Context, vmi *v1.VirtualMachineInstance, finalizers []string) (*v1.VirtualMachineInstance, error) {
	if finalizers == nil {
		finalizers = []string{}
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"finalizers": finalizers, "resourceVersion": vmi.ResourceVersion}})
	if err != nil {
		return nil, err
	}
	out, err := c.cfg.KemuClient.KemuV1alpha1().VirtualMachineInstances(vmi.Namespace).
		Patch(ctx, vmi.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err == nil {
		c.written.Record(vmi.Namespace+"/"+vmi.Name, vmi.ResourceVersion)
	}
	return out, err
}

// useKVM decides whether the VMI's Pod requests devices.kemu.dev/kvm.
func (c *Controller) useKVM(vmi *v1.VirtualMachineInstance) bool {
	switch c.cfg.KVM {
	case KVMAlways:
		return true
	case KVMNever:
		return false
	}
	if v, ok := vmi.Spec.NodeSelector[v1.NodeKVMLabel]; ok {
		return v == "true"
	}
	set := labels.Set{v1.NodeSchedulableLabel: "true", v1.NodeKVMLabel: "true"}
	for k, v := range vmi.Spec.NodeSelector {
		set[k] = v
	}
	nodes, err := c.nodeLister.List(labels.SelectorFromSet(set))
	return err == nil && len(nodes) > 0
}
