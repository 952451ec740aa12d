package vmi

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// podEnds remembers why a deleted launcher Pod ended, from the last state
// its delete event carried: Kubernetes often disrupts a Pod of a failed node
// (DisruptionTarget: DeletionByTaintManager, DeletionByPodGC) and removes it
// at once, and a sync that runs after the removal finds no Pod to read the
// reason from. An entry goes once the VMI's status carries it, or after
// podEndTTL, so the map stays as small as the deletions in flight.
type podEnds struct {
	mu sync.Mutex
	m  map[string]podEnd // namespace/name of the Pod
}

type podEnd struct {
	reason, msg string
	at          time.Time
}

// podEndTTL bounds how long a deleted Pod's reason is kept for a sync that
// has not come.
const podEndTTL = 10 * time.Minute

// record keeps the reason of a deleted Pod that failed or was disrupted;
// a Pod deleted while it ran normally is not recorded.
func (e *podEnds) record(pod *corev1.Pod, now time.Time) {
	if !podEndedBadly(pod) {
		return
	}
	reason, msg := podFailure(pod)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil {
		e.m = map[string]podEnd{}
	}
	for k, v := range e.m {
		if now.Sub(v.at) > podEndTTL {
			delete(e.m, k)
		}
	}
	e.m[pod.Namespace+"/"+pod.Name] = podEnd{reason: reason, msg: msg + " (the Pod is gone)", at: now}
}

// get returns what record kept for the Pod namespace/name.
func (e *podEnds) get(namespace, name string) (reason, msg string, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	v, ok := e.m[namespace+"/"+name]
	return v.reason, v.msg, ok
}

// forget drops the entry once the VMI carries the reason.
func (e *podEnds) forget(namespace, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.m, namespace+"/"+name)
}

// podEndedBadly: the Pod failed, or Kubernetes marked it disrupted.
func podEndedBadly(pod *corev1.Pod) bool {
	if pod.Status.Phase == corev1.PodFailed {
		return true
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason != "" {
			return true
		}
	}
	return false
}
