package evacuation

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/kube/status"
)

// sync reconciles one VMI's budget and evacuation.
func (c *Controller) sync(ctx context.Context, key string) (time.Duration, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return 0, nil
	}
	vmi, err := c.vmiLister.VirtualMachineInstances(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return 0, nil // its budgets go with it (owner reference)
	}
	if err != nil {
		return 0, err
	}
	if err := c.syncBudget(ctx, key, vmi); err != nil {
		return 0, err
	}
	return c.syncEvacuation(ctx, key, vmi)
}

// syncBudget makes the VMI's PodDisruptionBudgets one with the wanted
// minAvailable over its launcher Pods, or none.
func (c *Controller) syncBudget(ctx context.Context, key string, vmi *v1.VirtualMachineInstance) error {
	if !c.expect.Satisfied(budgetKey(key)) {
		return nil // a budget created is not in the cache yet: its event syncs again
	}
	want := budget(vmi)
	have, err := c.pdbLister.PodDisruptionBudgets(vmi.Namespace).List(labels.SelectorFromSet(labels.Set{BudgetForLabel: string(vmi.UID)}))
	if err != nil {
		return err
	}
	pdbs := c.kube.PolicyV1().PodDisruptionBudgets(vmi.Namespace)
	keep := want > 0
	for _, p := range have {
		if keep && p.DeletionTimestamp == nil {
			keep = false
			if p.Spec.MinAvailable == nil || p.Spec.MinAvailable.IntValue() != int(want) {
				upd := p.DeepCopy()
				upd.Spec.MinAvailable = ptr(intstr.FromInt32(want))
				if _, err := pdbs.Update(ctx, upd, metav1.UpdateOptions{}); err != nil {
					return fmt.Errorf("disruption budget %s/%s: %w", p.Namespace, p.Name, err)
				}
				klog.V(2).InfoS("Disruption budget changed", "vmi", klog.KObj(vmi), "pdb", klog.KObj(p), "minAvailable", want)
			}
			continue
		}
		uid := p.UID
		if err := pdbs.Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("disruption budget %s/%s: %w", p.Namespace, p.Name, err)
		}
		klog.V(2).InfoS("Disruption budget deleted", "vmi", klog.KObj(vmi), "pdb", klog.KObj(p))
	}
	if !keep {
		return nil
	}
	p := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName:    "kemu-disruption-budget-",
			Namespace:       vmi.Namespace,
			Labels:          map[string]string{BudgetForLabel: string(vmi.UID)},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vmi, v1.SchemeGroupVersion.WithKind("VirtualMachineInstance"))},
		},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr(intstr.FromInt32(want)),
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{launcherpod.CreatedByLabel: string(vmi.UID)}},
		},
	}
	c.expect.ExpectCreations(budgetKey(key), 1)
	created, err := pdbs.Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		c.expect.CreationObserved(budgetKey(key))
		return fmt.Errorf("disruption budget for VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	c.recorder.Eventf(vmi, corev1.EventTypeNormal, ReasonDisruptionBudget,
		"PodDisruptionBudget %s keeps %d launcher Pod(s) from eviction (evictionStrategy %s)", created.Name, want, strategy(vmi))
	return nil
}

// syncEvacuation marks a VMI on a cordoned node and migrates it away.
func (c *Controller) syncEvacuation(ctx context.Context, key string, vmi *v1.VirtualMachineInstance) (time.Duration, error) {
	var node *corev1.Node
	if vmi.Status.NodeName != "" {
		n, err := c.nodeLister.Get(vmi.Status.NodeName)
		if err != nil && !apierrors.IsNotFound(err) {
			return 0, err
		}
		node = n
	}
	m, err := c.migrationsOf(vmi)
	if err != nil {
		return 0, err
	}
	p := decide(vmi, node, m, c.opts.Now(), c.opts.RetryAfterFailure)
	if p.evacuationNode != vmi.Status.EvacuationNodeName {
		if _, err := status.Update(ctx, c.kemu.KemuV1alpha1().VirtualMachineInstances(vmi.Namespace), vmi,
			func(v *v1.VirtualMachineInstance) { v.Status.EvacuationNodeName = p.evacuationNode }); err != nil {
			return 0, fmt.Errorf("VMI %s/%s evacuationNodeName: %w", vmi.Namespace, vmi.Name, err)
		}
	}
	if p.migrate && c.expect.Satisfied(migrationKey(key)) {
		c.expect.ExpectCreations(migrationKey(key), 1)
		created, err := c.kemu.KemuV1alpha1().VirtualMachineInstanceMigrations(vmi.Namespace).Create(ctx, &v1.VirtualMachineInstanceMigration{
			ObjectMeta: metav1.ObjectMeta{GenerateName: vmi.Name + "-evacuation-", Namespace: vmi.Namespace,
				Labels: map[string]string{EvacuationLabel: node.Name}},
			Spec: v1.VirtualMachineInstanceMigrationSpec{VMIName: vmi.Name},
		}, metav1.CreateOptions{})
		if err != nil {
			c.expect.CreationObserved(migrationKey(key))
			return 0, fmt.Errorf("evacuation migration of VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
		}
		c.recorder.Eventf(vmi, corev1.EventTypeNormal, ReasonEvacuationMigration,
			"node %s is cordoned: migration %s moves the VMI away (evictionStrategy %s)", node.Name, created.Name, strategy(vmi))
		klog.InfoS("Evacuating a VMI", "vmi", klog.KObj(vmi), "node", node.Name, "migration", created.Name)
	}
	return p.retryIn, nil
}

// migrationsOf sums up the VMI's migrations in the cache.
func (c *Controller) migrationsOf(vmi *v1.VirtualMachineInstance) (migrations, error) {
	all, err := c.vmimLister.VirtualMachineInstanceMigrations(vmi.Namespace).List(labels.Everything())
	if err != nil {
		return migrations{}, err
	}
	var m migrations
	for _, x := range all {
		if x.Spec.VMIName != vmi.Name {
			continue
		}
		if !x.Status.Phase.IsFinal() {
			m.active = true
			continue
		}
		if _, ok := x.Labels[EvacuationLabel]; ok && x.Status.Phase == v1.MigrationFailed {
			if end := finalTime(x); end.After(m.lastFailed) {
				m.lastFailed = end
			}
		}
	}
	return m, nil
}

// finalTime is when the migration became final (its creation when it has
// no transition recorded).
func finalTime(m *v1.VirtualMachineInstanceMigration) time.Time {
	for _, t := range m.Status.PhaseTransitionTimestamps {
		if t.Phase == m.Status.Phase {
			return t.PhaseTransitionTimestamp.Time
		}
	}
	return m.CreationTimestamp.Time
}

func ptr[T any](v T) *T { return &v }
