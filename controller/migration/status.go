package migration

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/kube/status"
)

// updateStatus applies mutate to the migration's status and writes it if
// it changed (conflicts retried on the fresh object); a phase change is an
// Event (reason = the new phase) explaining why.
func (c *Controller) updateStatus(ctx context.Context, m *v1.VirtualMachineInstanceMigration, why string,
	mutate func(*v1.VirtualMachineInstanceMigration)) error {
	res, err := status.Update(ctx, c.cfg.KemuClient.KemuV1alpha1().VirtualMachineInstanceMigrations(m.Namespace), m, mutate)
	if err != nil || !res.Written {
		return err
	}
	c.written.Record(m.Namespace+"/"+m.Name, res.Before.ResourceVersion)
	if from, to := res.Before.Status.Phase, res.After.Status.Phase; from != to {
		typ := corev1.EventTypeNormal
		if to == v1.MigrationFailed {
			typ = corev1.EventTypeWarning
		}
		c.cfg.Recorder.Eventf(res.After, typ, string(to), "%s → %s: %s", phaseName(from), to, why)
	}
	return nil
}

func phaseName(p v1.VirtualMachineInstanceMigrationPhase) string {
	if p == v1.MigrationPhaseUnset {
		return "(new)"
	}
	return string(p)
}

// setPhase moves a migration that is not final to phase (recording when),
// leaving a final one alone.
func setPhase(m *v1.VirtualMachineInstanceMigration, phase v1.VirtualMachineInstanceMigrationPhase) {
	if m.Status.Phase == phase || m.Status.Phase.IsFinal() {
		return
	}
	m.Status.Phase = phase
	m.Status.PhaseTransitionTimestamps = append(m.Status.PhaseTransitionTimestamps,
		v1.VirtualMachineInstanceMigrationPhaseTransitionTimestamp{Phase: phase, PhaseTransitionTimestamp: metav1.Now()})
}

// setCondition replaces the condition of its type; the times move only
// with a change of status, so a repeated sync writes nothing.
func setCondition(m *v1.VirtualMachineInstanceMigration, typ, reason, msg string) {
	now := metav1.Now()
	for i := range m.Status.Conditions {
		c := &m.Status.Conditions[i]
		if c.Type != typ {
			continue
		}
		if c.Status != string(corev1.ConditionTrue) {
			c.Status, c.LastTransitionTime = string(corev1.ConditionTrue), now
		}
		if c.Reason != reason || c.Message != msg {
			c.Reason, c.Message, c.LastProbeTime = reason, msg, now
		}
		return
	}
	m.Status.Conditions = append(m.Status.Conditions, v1.VirtualMachineInstanceMigrationCondition{Type: typ,
		Status: string(corev1.ConditionTrue), Reason: reason, Message: msg, LastProbeTime: now, LastTransitionTime: now})
}

// condition is m's condition of type typ, nil when it has none.
func condition(m *v1.VirtualMachineInstanceMigration, typ string) *v1.VirtualMachineInstanceMigrationCondition {
	for i := range m.Status.Conditions {
		if m.Status.Conditions[i].Type == typ {
			return &m.Status.Conditions[i]
		}
	}
	return nil
}

func removeCondition(m *v1.VirtualMachineInstanceMigration, typ string) {
	m.Status.Conditions = slices.DeleteFunc(m.Status.Conditions, func(c v1.VirtualMachineInstanceMigrationCondition) bool { return c.Type == typ })
	if len(m.Status.Conditions) == 0 {
		m.Status.Conditions = nil
	}
}

// fail moves a migration that is not final to Failed with the condition
// Failed (reason, msg).
func (c *Controller) fail(ctx context.Context, m *v1.VirtualMachineInstanceMigration, reason, msg string) error {
	return c.updateStatus(ctx, m, reason+": "+msg, func(m *v1.VirtualMachineInstanceMigration) {
		if m.Status.Phase.IsFinal() {
			return
		}
		setPhase(m, v1.MigrationFailed)
		removeCondition(m, ConditionWaitingForLimits)
		setCondition(m, ConditionFailed, reason, msg)
	})
}

// mirrorState copies the VMI's migrationState of m into m's status (as
// KubeVirt shows it on the migration too).
func mirrorState(m *v1.VirtualMachineInstanceMigration, ms *v1.VirtualMachineInstanceMigrationState) {
	if ms != nil {
		m.Status.MigrationState = ms.DeepCopy()
	}
}

// updateVMI applies mutate to the VMI's status (conflicts retried on the
// fresh VMI: the node agents' fields in between are kept).
func (c *Controller) updateVMI(ctx context.Context, vmi *v1.VirtualMachineInstance, mutate func(*v1.VirtualMachineInstance)) error {
	_, err := status.Update(ctx, c.cfg.KemuClient.KemuV1alpha1().VirtualMachineInstances(vmi.Namespace), vmi, mutate)
	return err
}

// ensureFinalizer adds Finalizer with a merge patch carrying the
// resourceVersion (a stale cache conflicts instead of dropping another
// finalizer).
func (c *Controller) ensureFinalizer(ctx context.Context, m *v1.VirtualMachineInstanceMigration) (*v1.VirtualMachineInstanceMigration, error) {
	if slices.Contains(m.Finalizers, Finalizer) {
		return m, nil
	}
	return c.patchFinalizers(ctx, m, append(slices.Clone(m.Finalizers), Finalizer))
}

func (c *Controller) removeFinalizer(ctx context.Context, m *v1.VirtualMachineInstanceMigration) error {
	if !slices.Contains(m.Finalizers, Finalizer) {
		return nil
	}
	keep := slices.DeleteFunc(slices.Clone(m.Finalizers), func(f string) bool { return f == Finalizer })
	_, err := c.patchFinalizers(ctx, m, keep)
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func (c *Controller) patchFinalizers(ctx context.Context, m *v1.VirtualMachineInstanceMigration, finalizers []string) (*v1.VirtualMachineInstanceMigration, error) {
	if finalizers == nil {
		finalizers = []string{}
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"finalizers": finalizers, "resourceVersion": m.ResourceVersion}})
	if err != nil {
		return nil, err
	}
	out, err := c.cfg.KemuClient.KemuV1alpha1().VirtualMachineInstanceMigrations(m.Namespace).
		Patch(ctx, m.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return nil, fmt.Errorf("patching the finalizers of migration %s/%s: %w", m.Namespace, m.Name, err)
	}
	c.written.Record(m.Namespace+"/"+m.Name, m.ResourceVersion)
	return out, nil
}
