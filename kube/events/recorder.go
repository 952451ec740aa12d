// Package events makes the event recorders of kemu's controllers and node
// agent: client-go's broadcaster writing core/v1 Events through the API
// server, with a private scheme that knows kemu's kinds.
package events

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	kemuscheme "github.com/kemu-dev/kemu/api/client/clientset/versioned/scheme"
)

// eventScheme knows Kubernetes' and kemu's kinds (an Event references a VMI
// by kind). It is private: adding to client-go's global scheme while
// informers decode with it would race.
var eventScheme = sync.OnceValues(func() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := scheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := kemuscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
})

// NewRecorder returns an event recorder writing Events as component (and
// logging them at verbosity 4) and the function that stops it, flushing
// nothing further.
func NewRecorder(ctx context.Context, kube kubernetes.Interface, component string) (record.EventRecorder, func(), error) {
	return NewRecorderFor(ctx, kube, corev1.EventSource{Component: component})
}

// NewRecorderFor is NewRecorder with a whole event source (a node agent
// names its node as the source's host).
func NewRecorderFor(ctx context.Context, kube kubernetes.Interface, source corev1.EventSource) (record.EventRecorder, func(), error) {
	s, err := eventScheme()
	if err != nil {
		return nil, nil, err
	}
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartStructuredLogging(4)
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	return b.NewRecorder(s, source), b.Shutdown, nil
}
