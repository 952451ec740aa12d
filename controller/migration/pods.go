package migration

import (
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

var everything = labels.Everything()

// ownerVMI is the name of the VMI controlling pod.
func ownerVMI(pod *corev1.Pod) (string, bool) {
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.Kind != "VirtualMachineInstance" || ref.APIVersion != v1.SchemeGroupVersion.String() {
		return "", false
	}
	return ref.Name, true
}

// ownedBy: pod is controlled by vmi (a Pod's labels alone are anyone's to
// write).
func ownedBy(pod *corev1.Pod, vmi *v1.VirtualMachineInstance) bool {
	ref := metav1.GetControllerOf(pod)
	return ref != nil && ref.UID == vmi.UID
}

// vmiOf is the migration's VMI from the cache, nil when there is none.
func (c *Controller) vmiOf(m *v1.VirtualMachineInstanceMigration) (*v1.VirtualMachineInstance, error) {
	vmi, err := c.vmiLister.VirtualMachineInstances(m.Namespace).Get(m.Spec.VMIName)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return vmi, err
}

// targetPod is m's target Pod in the cache (label and owner), nil when
// there is none.
func (c *Controller) targetPod(m *v1.VirtualMachineInstanceMigration, vmi *v1.VirtualMachineInstance) (*corev1.Pod, error) {
	if vmi == nil {
		return nil, nil
	}
	pods, err := c.podLister.Pods(m.Namespace).List(labels.SelectorFromSet(labels.Set{launcherpod.MigrationUIDLabel: string(m.UID)}))
	if err != nil {
		return nil, err
	}
	for _, p := range pods {
		if ownedBy(p, vmi) {
			return p, nil
		}
	}
	return nil, nil
}

// sourcePod is the VMI's launcher Pod in the cache, nil when there is none.
func (c *Controller) sourcePod(vmi *v1.VirtualMachineInstance) (*corev1.Pod, error) {
	if vmi.Status.LauncherPod == "" {
		return nil, nil
	}
	pod, err := c.podLister.Pods(vmi.Namespace).Get(vmi.Status.LauncherPod)
	if apierrors.IsNotFound(err) || (err == nil && !ownedBy(pod, vmi)) {
		return nil, nil
	}
	return pod, err
}

// running lists the migrations that count against the limits: those past
// Pending and not final, those whose target Pod was just created
// (inflight), and every migration's target Pod that still lives without
// being its VMI's launcher Pod (a failed migration's Pod still terminating
// takes its slot until it is gone or its migration is deleted). Call with
// c.admit held.
func (c *Controller) running() ([]running, error) {
	all, err := c.migLister.List(everything)
	if err != nil {
		return nil, err
	}
	seen := map[types.UID]bool{}
	var out []running
	add := func(uid types.UID, ns, vmiName string) {
		if seen[uid] {
			return
		}
		seen[uid] = true
		r := running{uid: uid}
		if vmi, err := c.vmiLister.VirtualMachineInstances(ns).Get(vmiName); err == nil {
			r.sourceNode = vmi.Status.NodeName
			if ms := vmi.Status.MigrationState; ms != nil && ms.MigrationUID == uid && ms.SourceNode != "" {
				r.sourceNode = ms.SourceNode
			}
		}
		out = append(out, r)
	}
	byUID := map[types.UID]*v1.VirtualMachineInstanceMigration{}
	for _, m := range all {
		byUID[m.UID] = m
	}
	for uid := range c.inflight {
		if m, ok := byUID[uid]; !ok || m.Status.Phase.IsFinal() || pastPending(m.Status.Phase) {
			delete(c.inflight, uid) // the cache shows it now (or it ended)
		}
	}
	for _, m := range all {
		if pastPending(m.Status.Phase) || c.inflight[m.UID] {
			add(m.UID, m.Namespace, m.Spec.VMIName)
		}
	}
	pods, err := c.podLister.List(everything)
	if err != nil {
		return nil, err
	}
	for _, p := range pods {
		uid := types.UID(p.Labels[launcherpod.MigrationUIDLabel])
		if uid == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if byUID[uid] == nil {
			continue // no migration of ours (anyone may label a Pod)
		}
		vmiName, ok := ownerVMI(p)
		if !ok {
			continue
		}
		vmi, err := c.vmiLister.VirtualMachineInstances(p.Namespace).Get(vmiName)
		if err != nil || !ownedBy(p, vmi) || vmi.Status.LauncherPod == p.Name {
			continue // not the VMI's, or a finished migration's target: the VM's launcher Pod now
		}
		add(uid, p.Namespace, vmiName)
	}
	return out, nil
}
