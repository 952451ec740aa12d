package vmi

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	kemuscheme "github.com/kemu-dev/kemu/api/client/clientset/versioned/scheme"
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
	// A scheme of its own that knows the kemu kinds (an Event references a
	// VMI by kind): adding them to client-go's global scheme while
	// informers decode with it would race.
	s := runtime.NewScheme()
	if err := scheme.AddToScheme(s); err != nil {
		return nil, nil, err
	}
	if err := kemuscheme.AddToScheme(s); err != nil {
		return nil, nil, err
	}
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartStructuredLogging(4)
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	return b.NewRecorder(s, corev1.EventSource{Component: EventComponent, Host: nodeName}), b.Shutdown, nil
}
