package vmi

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/kemu-dev/kemu/kube/events"
)

// EventComponent is the source component of the node agent's events.
const EventComponent = "kemu-nodeagent"

// NewRecorder returns the node agent's event recorder — source
// kemu-nodeagent on node nodeName (source.host and reportingInstance: the
// API server's kemu-nodeagent-events policy admits the node agent's events
// only with its own node there) — and the function that stops it. Events
// are also logged at verbosity 4.
func NewRecorder(ctx context.Context, kube kubernetes.Interface, nodeName string) (record.EventRecorder, func(), error) {
	if nodeName == "" {
		return nil, nil, errors.New("vmi: the event recorder needs the node name")
	}
	return events.NewRecorderFor(ctx, kube, corev1.EventSource{Component: EventComponent, Host: nodeName})
}
