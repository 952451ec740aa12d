package node

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/kube/status"
	"github.com/kemu-dev/kemu/kube/vmistatus"
)

// heartbeat is what a Node's heartbeat annotation says at a time.
type heartbeat struct {
	kemu  bool          // the node has the annotation
	valid bool          // and it parses
	at    time.Time     // when the agent last beat
	stale bool          // older than the timeout
	left  time.Duration // until it goes stale, when fresh
}

// heartbeatOf reads the node's heartbeat at now.
func heartbeatOf(node *corev1.Node, now time.Time, timeout time.Duration) heartbeat {
	s, ok := node.Annotations[v1.NodeHeartbeatAnnotation]
	if !ok {
		return heartbeat{}
	}
	at, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return heartbeat{kemu: true}
	}
	hb := heartbeat{kemu: true, valid: true, at: at}
	age := now.Sub(at)
	if age > timeout {
		hb.stale = true
	} else {
		// A heartbeat from the future (clock skew) is fresh for at most
		// one timeout from now.
		hb.left = min(timeout-age, timeout)
	}
	return hb
}

// podAlive says whether a Pod may still run its VM: not ended, and not
// with every container terminated (a Pod stuck terminating on a dead node).
func podAlive(pod *corev1.Pod) bool {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return false
	}
	if len(pod.Status.ContainerStatuses) == 0 {
		return true
	}
	for _, s := range pod.Status.ContainerStatuses {
		if s.State.Terminated == nil {
			return true
		}
	}
	return false
}

// launcherOf says whether the Pod is (one of) the VMI's launcher Pods: the
// VMI controls it, the VMI lists it in activePods, or names it launcherPod.
func launcherOf(pod *corev1.Pod, vmi *v1.VirtualMachineInstance) bool {
	if pod.Namespace != vmi.Namespace {
		return false
	}
	if ref := metav1.GetControllerOf(pod); ref != nil && ref.UID == vmi.UID {
		return true
	}
	if _, ok := vmi.Status.ActivePods[pod.UID]; ok {
		return true
	}
	return vmi.Status.LauncherPod != "" && pod.Name == vmi.Status.LauncherPod
}

// sync checks one node; it returns when to look at it again (0: on its
// next event).
func (c *Controller) sync(ctx context.Context, name string) (time.Duration, error) {
	now := c.opts.Now()
	node, err := c.nodeLister.Get(name)
	if apierrors.IsNotFound(err) {
		// The Node object is gone: its VMIs cannot run anywhere.
		return c.failOrphans(ctx, name, fmt.Sprintf("node %s no longer exists", name))
	}
	if err != nil {
		return 0, err
	}
	hb := heartbeatOf(node, now, c.opts.HeartbeatTimeout)
	switch {
	case !hb.kemu:
		return 0, nil
	case !hb.valid:
		klog.InfoS("Ignoring an unreadable heartbeat", "node", name, "value", node.Annotations[v1.NodeHeartbeatAnnotation])
		return 0, nil
	case !hb.stale:
		// Look again when it would go stale (plus a little, so the
		// heartbeat is clearly past the threshold then).
		return hb.left + time.Second, nil
	}

	if node.Labels[v1.NodeSchedulableLabel] != "false" {
		if err := c.markUnschedulable(ctx, node); err != nil {
			return 0, err
		}
		c.recorder.Eventf(node, corev1.EventTypeWarning, ReasonNodeUnresponsive,
			"No kemu heartbeat since %s (%s ago): labelled %s=false", hb.at.Format(time.RFC3339),
			now.Sub(hb.at).Round(time.Second), v1.NodeSchedulableLabel)
		klog.InfoS("Node heartbeat is stale: unschedulable for VMs", "node", name, "heartbeat", hb.at)
	}
	return c.failOrphans(ctx, name, fmt.Sprintf("node %s has sent no heartbeat since %s", name, hb.at.Format(time.RFC3339)))
}

// markUnschedulable sets kemu.dev/schedulable=false, only on the node as
// the cache saw it: if the agent just beat, the conflict brings the news.
func (c *Controller) markUnschedulable(ctx context.Context, node *corev1.Node) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": node.ResourceVersion,
		"labels":          map[string]string{v1.NodeSchedulableLabel: "false"},
	}})
	if err != nil {
		return err
	}
	_, err = c.kube.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// failOrphans fails the node's unfinished VMIs that have no live launcher
// Pod left (read from the API server, not a cache). VMIs whose Pods still
// run are left to Kubernetes' own node lifecycle (which evicts them) and
// looked at again after RecheckInterval.
func (c *Controller) failOrphans(ctx context.Context, nodeName, why string) (time.Duration, error) {
	objs, err := c.vmiIndexer.ByIndex(vmiNodeIndex, nodeName)
	if err != nil {
		return 0, err
	}
	var vmis []*v1.VirtualMachineInstance
	for _, o := range objs {
		if vmi := o.(*v1.VirtualMachineInstance); !vmi.Status.Phase.IsFinal() {
			vmis = append(vmis, vmi)
		}
	}
	if len(vmis) == 0 {
		return 0, nil
	}
	pods, err := c.kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", nodeName).String()})
	if err != nil {
		return 0, err
	}
	waiting := 0
	for _, vmi := range vmis {
		alive := false
		for i := range pods.Items {
			if p := &pods.Items[i]; launcherOf(p, vmi) && podAlive(p) {
				alive = true
				break
			}
		}
		if alive {
			waiting++
			continue
		}
		if err := c.failVMI(ctx, vmi, nodeName, why); err != nil {
			return 0, err
		}
	}
	if waiting > 0 {
		return c.opts.RecheckInterval, nil
	}
	return 0, nil
}

// failVMI moves the VMI to Failed with reason NodeUnresponsive, if it is
// still unfinished on that node.
func (c *Controller) failVMI(ctx context.Context, cached *v1.VirtualMachineInstance, nodeName, why string) error {
	res, err := status.Update(ctx, c.kemu.KemuV1alpha1().VirtualMachineInstances(cached.Namespace), cached,
		func(vmi *v1.VirtualMachineInstance) {
			if vmi.Status.NodeName == nodeName && !vmi.Status.Phase.IsFinal() {
				markFailed(vmi, why, metav1.NewTime(c.opts.Now()))
			}
		})
	if apierrors.IsNotFound(err) || (err == nil && !res.Written) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("failing VMI: %w", err)
	}
	klog.InfoS("Failed VMI of an unresponsive node", "vmi", klog.KObj(cached), "node", nodeName)
	c.recorder.Eventf(cached, corev1.EventTypeWarning, ReasonNodeUnresponsive, "%s and no launcher Pod is left: VMI failed", why)
	return nil
}

// markFailed sets the VMI's status to Failed, NodeUnresponsive.
func markFailed(vmi *v1.VirtualMachineInstance, why string, now metav1.Time) {
	vmistatus.SetPhase(vmi, v1.Failed, now)
	vmi.Status.Reason = ReasonNodeUnresponsive
	vmistatus.SetCondition(vmi, v1.VirtualMachineInstanceCondition{Type: v1.VirtualMachineInstanceReady,
		Status: corev1.ConditionFalse, Reason: ReasonNodeUnresponsive, Message: why}, now)
}
