// Package worker runs the workers of a sample-controller style loop: keys
// taken from a rate-limited work queue, one sync per key, retried with
// back-off on error, queued again after the delay a sync asks for. The
// kemu controllers and the node agent share it.
package worker

import (
	"context"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// Sync reconciles one key. A positive duration asks for the key again after
// that long; an error retries it with the queue's rate limit.
type Sync func(ctx context.Context, key string) (time.Duration, error)

// Run runs workers (at least one) on queue until ctx ends, then shuts the
// queue down and waits for them. Call it once the informer caches synced.
// A failed sync is logged — at V(4) for a conflict, the object merely
// changed meanwhile — and retried; one that failed because ctx was ending
// is dropped (the next run, or leader, syncs the key again). name labels
// the log lines.
func Run(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string], workers int, name string, fn Sync) {
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Go(func() {
			wait.UntilWithContext(ctx, func(ctx context.Context) {
				for next(ctx, queue, name, fn) {
				}
			}, time.Second)
		})
	}
	<-ctx.Done()
	queue.ShutDown()
	wg.Wait()
}

// next handles one key; false once the queue shut down.
func next(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string], name string, fn Sync) bool {
	key, quit := queue.Get()
	if quit {
		return false
	}
	defer queue.Done(key)
	after, err := fn(ctx, key)
	logger := klog.FromContext(ctx)
	switch {
	case err != nil && ctx.Err() != nil:
		// Stopping: whoever runs next syncs the key again.
	case apierrors.IsConflict(err):
		logger.V(4).Info("Object changed meanwhile, requeueing", "controller", name, "key", key)
		queue.AddRateLimited(key)
	case err != nil:
		logger.Error(err, "Sync failed, will retry", "controller", name, "key", key)
		queue.AddRateLimited(key)
	default:
		queue.Forget(key)
		if after > 0 {
			queue.AddAfter(key, after)
		}
	}
	return true
}
