package migration

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// expectationsRetry: a safety re-check while a target Pod creation is not
// in the cache.
const expectationsRetry = 30 * time.Second

// sync reconciles one migration; idempotent: every step reads the caches
// and does only what is missing.
func (c *Controller) sync(ctx context.Context, key string) (time.Duration, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return 0, nil
	}
	m, err := c.migLister.VirtualMachineInstanceMigrations(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.expectations.Delete(key)
		c.written.Forget(key)
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if c.written.Stale(key, m.ResourceVersion) || !c.expectations.Satisfied(key) {
		// Our own write or target Pod is not in the cache yet; its event
		// requeues us.
		return expectationsRetry, nil
	}
	vmi, err := c.vmiOf(m)
	if err != nil {
		return 0, err
	}
	switch m.Status.Phase {
	case v1.MigrationSucceeded, v1.MigrationFailed:
		return 0, c.syncFinal(ctx, m, vmi)
	case v1.MigrationPhaseUnset:
		return 0, c.syncNew(ctx, m, vmi)
	case v1.MigrationPending:
		return c.syncPending(ctx, key, m, vmi)
	default:
		return c.syncProgress(ctx, m, vmi)
	}
}

// syncNew adds the finalizer and accepts (Pending) or refuses (Failed) a
// new migration.
func (c *Controller) syncNew(ctx context.Context, m *v1.VirtualMachineInstanceMigration, vmi *v1.VirtualMachineInstance) error {
	if m.DeletionTimestamp == nil {
		var err error
		if m, err = c.ensureFinalizer(ctx, m); err != nil {
			return err
		}
	}
	others, err := c.migLister.VirtualMachineInstanceMigrations(m.Namespace).List(everything)
	if err != nil {
		return err
	}
	c.admit.Lock() // holdsPod reads inflight
	reason, msg := refusal(m, vmi, others, c.holdsPod)
	c.admit.Unlock()
	if reason != "" && vmiStateRefusal(reason) {
		// Refusing is final: judge the VMI as the API server has it, not
		// as a cache that may lag (a migration created right after its VMI
		// turned Running).
		live, err := c.cfg.KemuClient.KemuV1alpha1().VirtualMachineInstances(m.Namespace).Get(ctx, m.Spec.VMIName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			live = nil
		case err != nil:
			return err
		}
		c.admit.Lock()
		reason, msg = refusal(m, live, others, c.holdsPod)
		c.admit.Unlock()
	}
	if reason != "" {
		return c.fail(ctx, m, reason, msg)
	}
	if m.DeletionTimestamp != nil {
		return c.fail(ctx, m, ReasonAborted, "deleted before it started")
	}
	return c.updateStatus(ctx, m, "accepted", func(m *v1.VirtualMachineInstanceMigration) {
		if m.Status.Phase == v1.MigrationPhaseUnset {
			setPhase(m, v1.MigrationPending)
		}
	})
}

// holdsPod: o has (or is getting) a target Pod. Call with c.admit held.
func (c *Controller) holdsPod(o *v1.VirtualMachineInstanceMigration) bool {
	if c.inflight[o.UID] {
		return true
	}
	vmi, err := c.vmiOf(o)
	if err != nil || vmi == nil {
		return false
	}
	p, err := c.targetPod(o, vmi)
	return err == nil && p != nil
}

// syncPending creates the target Pod once the migration may start and the
// limits allow it, and moves the migration to Scheduling. The decision and
// the create run under c.admit.
func (c *Controller) syncPending(ctx context.Context, key string, m *v1.VirtualMachineInstanceMigration, vmi *v1.VirtualMachineInstance) (time.Duration, error) {
	c.admit.Lock()
	defer c.admit.Unlock()
	others, err := c.migLister.VirtualMachineInstanceMigrations(m.Namespace).List(everything)
	if err != nil {
		return 0, err
	}
	if reason, msg := refusal(m, vmi, others, c.holdsPod); reason != "" {
		return 0, c.fail(ctx, m, reason, msg)
	}
	if m.DeletionTimestamp != nil {
		return 0, c.fail(ctx, m, ReasonAborted, "canceled while waiting")
	}
	target, err := c.targetPod(m, vmi)
	if err != nil {
		return 0, err
	}
	if target != nil {
		// Created by an earlier run whose status write did not happen.
		return 0, c.toScheduling(ctx, m, "target Pod "+target.Name+" exists")
	}
	source, err := c.sourcePod(vmi)
	if err != nil {
		return 0, err
	}
	if source == nil || source.Spec.NodeName == "" {
		return 0, c.fail(ctx, m, ReasonSourcePodNotFound, fmt.Sprintf("VMI %q has no bound launcher Pod %q", vmi.Name, vmi.Status.LauncherPod))
	}
	active, err := c.running()
	if err != nil {
		return 0, err
	}
	if ok, why := withinLimits(m.UID, source.Spec.NodeName, active, c.cfg.Limits); !ok {
		err := c.updateStatus(ctx, m, why, func(m *v1.VirtualMachineInstanceMigration) {
			setCondition(m, ConditionWaitingForLimits, ReasonOverLimit, why)
		})
		return c.cfg.LimitRetry, err
	}
	pod, err := renderTarget(c.cfg.Template, m, vmi, source, c.cfg.AllowSameNode)
	if err != nil {
		c.cfg.Recorder.Event(m, corev1.EventTypeWarning, ReasonFailedCreate, err.Error())
		return 0, err
	}
	c.expectations.ExpectCreations(key, 1)
	created, err := c.cfg.KubeClient.CoreV1().Pods(m.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		c.expectations.CreationObserved(key)
	case err != nil:
		c.expectations.CreationObserved(key)
		c.cfg.Recorder.Eventf(m, corev1.EventTypeWarning, ReasonFailedCreate, "Creating target Pod %s: %v", pod.Name, err)
		return 0, fmt.Errorf("creating target Pod %s of migration %s: %w", pod.Name, key, err)
	default:
		c.cfg.Recorder.Eventf(m, corev1.EventTypeNormal, ReasonSuccessfulCreate, "Created target Pod %s", created.Name)
	}
	c.inflight[m.UID] = true
	return 0, c.toScheduling(ctx, m, "created target Pod "+pod.Name)
}

func (c *Controller) toScheduling(ctx context.Context, m *v1.VirtualMachineInstanceMigration, why string) error {
	return c.updateStatus(ctx, m, why, func(m *v1.VirtualMachineInstanceMigration) {
		if m.Status.Phase != v1.MigrationPending {
			return
		}
		removeCondition(m, ConditionWaitingForLimits)
		setPhase(m, v1.MigrationScheduling)
	})
}

// syncProgress follows a migration from Scheduling to its end (progress).
func (c *Controller) syncProgress(ctx context.Context, m *v1.VirtualMachineInstanceMigration, vmi *v1.VirtualMachineInstance) (time.Duration, error) {
	target, err := c.targetPod(m, vmi)
	if err != nil {
		return 0, err
	}
	s := progress(m, vmi, target, time.Now(), c.cfg.Timeouts)
	logger := klog.FromContext(ctx).WithValues("migration", klog.KObj(m))
	if vmi != nil {
		switch {
		case s.writeState:
			err = c.updateVMI(ctx, vmi, func(vmi *v1.VirtualMachineInstance) { c.writeState(m, vmi, target) })
		case s.failState:
			err = c.updateVMI(ctx, vmi, func(vmi *v1.VirtualMachineInstance) { failState(m, vmi, s.reason) })
		case s.abort:
			err = c.updateVMI(ctx, vmi, func(vmi *v1.VirtualMachineInstance) { abortState(m, vmi) })
			if err == nil && condition(m, ConditionAbortRequested) == nil {
				c.cfg.Recorder.Event(m, corev1.EventTypeNormal, ReasonAbortRequested, s.msg)
				err = c.updateStatus(ctx, m, s.msg, func(m *v1.VirtualMachineInstanceMigration) {
					setCondition(m, ConditionAbortRequested, s.reason, s.msg)
				})
			}
		case s.handoff:
			err = c.updateVMI(ctx, vmi, func(vmi *v1.VirtualMachineInstance) { handoff(m, vmi, target) })
		}
		if err != nil {
			return 0, err
		}
	}
	if s.deleteTarget && target != nil {
		if err := c.deleteTarget(ctx, m, vmi, target, s.reason); err != nil {
			return 0, err
		}
	}
	if s.phase == "" {
		// Mirror what the node agents wrote.
		return s.after, c.updateStatus(ctx, m, "", func(m *v1.VirtualMachineInstanceMigration) { mirrorState(m, stateOf(m, vmi)) })
	}
	logger.V(2).Info("Migration moves", "from", m.Status.Phase, "to", s.phase, "reason", s.reason)
	why := s.msg
	return s.after, c.updateStatus(ctx, m, why, func(m *v1.VirtualMachineInstanceMigration) {
		if m.Status.Phase.IsFinal() {
			return
		}
		setPhase(m, s.phase)
		if s.phase == v1.MigrationFailed {
			setCondition(m, ConditionFailed, s.reason, s.msg)
		}
		mirrorState(m, stateOf(m, vmi))
		if s.handoff || s.failState {
			// Our own VMI write may not be in the cache yet.
			if fresh := stateOfFresh(m, vmi, s, target); fresh != nil {
				m.Status.MigrationState = fresh
			}
		}
	})
}

// stateOfFresh is what the VMI's migrationState holds after this sync's
// own write, for the migration's mirror.
func stateOfFresh(m *v1.VirtualMachineInstanceMigration, vmi *v1.VirtualMachineInstance, s step, target *corev1.Pod) *v1.VirtualMachineInstanceMigrationState {
	cp := vmi.DeepCopy()
	switch {
	case s.handoff:
		handoff(m, cp, target)
	case s.failState:
		failState(m, cp, s.reason)
	}
	return stateOf(m, cp).DeepCopy()
}

// syncFinal deletes a failed migration's target Pod, drops the finalizer,
// and keeps only KeepFinished finished migrations of the VMI.
func (c *Controller) syncFinal(ctx context.Context, m *v1.VirtualMachineInstanceMigration, vmi *v1.VirtualMachineInstance) error {
	if m.Status.Phase == v1.MigrationFailed {
		target, err := c.targetPod(m, vmi)
		if err != nil {
			return err
		}
		if target != nil && target.Name != vmi.Status.LauncherPod && target.Status.Phase != corev1.PodFailed &&
			target.Status.Phase != corev1.PodSucceeded {
			if err := c.deleteTarget(ctx, m, vmi, target, "the migration failed"); err != nil {
				return err
			}
		}
	}
	if err := c.removeFinalizer(ctx, m); err != nil {
		return err
	}
	return c.pruneFinished(ctx, m)
}

// deleteTarget deletes a target Pod (UID precondition) that is not being
// deleted and is not the VMI's launcher Pod.
func (c *Controller) deleteTarget(ctx context.Context, m *v1.VirtualMachineInstanceMigration, vmi *v1.VirtualMachineInstance, pod *corev1.Pod, why string) error {
	if pod.DeletionTimestamp != nil || (vmi != nil && vmi.Status.LauncherPod == pod.Name) {
		return nil
	}
	uid := pod.UID
	err := c.cfg.KubeClient.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		c.cfg.Recorder.Eventf(m, corev1.EventTypeWarning, ReasonFailedDelete, "Deleting target Pod %s: %v", pod.Name, err)
		return fmt.Errorf("deleting target Pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	c.cfg.Recorder.Eventf(m, corev1.EventTypeNormal, ReasonSuccessfulDelete, "Deleted target Pod %s: %s", pod.Name, why)
	return nil
}

// writeState (Scheduled) gives the VMI m's migrationState: identity and
// configuration. A migrationState of another migration still running is
// left alone (refusal keeps that from happening).
func (c *Controller) writeState(m *v1.VirtualMachineInstanceMigration, vmi *v1.VirtualMachineInstance, target *corev1.Pod) {
	if vmi.Status.Phase.IsFinal() {
		return
	}
	if ms := vmi.Status.MigrationState; ms != nil {
		if ms.MigrationUID == m.UID || (!ms.Completed && !ms.Failed) {
			return
		}
	}
	vmi.Status.MigrationState = &v1.VirtualMachineInstanceMigrationState{
		MigrationUID:           m.UID,
		SourceNode:             vmi.Status.NodeName,
		SourcePod:              vmi.Status.LauncherPod,
		TargetNode:             target.Spec.NodeName,
		TargetPod:              target.Name,
		MigrationConfiguration: c.cfg.Policy.Configuration(),
	}
}

// failState marks m's migrationState failed by the controller.
func failState(m *v1.VirtualMachineInstanceMigration, vmi *v1.VirtualMachineInstance, reason string) {
	ms := stateOf(m, vmi)
	if ms == nil || ms.Failed || (ms.Completed && ms.TargetNodeDomainReadyTimestamp != nil) {
		return
	}
	ms.Failed = true
	ms.FailureReason = reason
	if ms.EndTimestamp == nil {
		now := metav1.Now()
		ms.EndTimestamp = &now
	}
}

// abortState asks the source node agent to cancel m.
func abortState(m *v1.VirtualMachineInstanceMigration, vmi *v1.VirtualMachineInstance) {
	ms := stateOf(m, vmi)
	if ms == nil || ms.AbortRequested || ms.Failed {
		return
	}
	ms.AbortRequested = true
	ms.AbortStatus = v1.MigrationAbortInProgress
}

// handoff is the controller's end of a migration: the VMI runs on the
// target node in the target Pod.
func handoff(m *v1.VirtualMachineInstanceMigration, vmi *v1.VirtualMachineInstance, target *corev1.Pod) {
	ms := stateOf(m, vmi)
	if ms == nil || !ms.Completed || ms.Failed || ms.TargetNodeDomainReadyTimestamp == nil || vmi.Status.Phase.IsFinal() {
		return
	}
	if vmi.Status.EvacuationNodeName != "" && vmi.Status.EvacuationNodeName == ms.SourceNode {
		vmi.Status.EvacuationNodeName = ""
	}
	vmi.Status.NodeName = ms.TargetNode
	vmi.Status.LauncherPod = ms.TargetPod
	if target != nil && target.Name == ms.TargetPod {
		if vmi.Status.ActivePods == nil {
			vmi.Status.ActivePods = map[types.UID]string{}
		}
		vmi.Status.ActivePods[target.UID] = ms.TargetNode
	}
	if ms.EndTimestamp == nil {
		now := metav1.Now()
		ms.EndTimestamp = &now
	}
}
