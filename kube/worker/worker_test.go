package worker

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"
)

// A real client-go queue; the sync records what it saw.
func TestRun(t *testing.T) {
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Millisecond, 10*time.Millisecond))
	var mu sync.Mutex
	calls := map[string]int{}
	done := make(chan struct{})
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "vmis"}, "c", errors.New("changed"))
	fn := func(_ context.Context, key string) (time.Duration, error) {
		mu.Lock()
		defer mu.Unlock()
		calls[key]++
		n := calls[key]
		switch {
		case key == "fails" && n < 3:
			return 0, errors.New("not yet")
		case key == "conflict" && n < 2:
			return 0, conflict
		case key == "again" && n < 3:
			return time.Millisecond, nil
		}
		if calls["fails"] >= 3 && calls["conflict"] >= 2 && calls["again"] >= 3 && calls["once"] >= 1 {
			select {
			case <-done:
			default:
				close(done)
			}
		}
		return 0, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	finished := make(chan struct{})
	go func() { Run(ctx, queue, 2, "test", fn); close(finished) }()
	for _, k := range []string{"once", "fails", "conflict", "again"} {
		queue.Add(k)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("keys not synced to the end: %v", calls)
	}
	cancel()
	select {
	case <-finished:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after ctx ended")
	}
	mu.Lock()
	defer mu.Unlock()
	if calls["once"] != 1 || calls["fails"] != 3 || calls["conflict"] != 2 || calls["again"] != 3 {
		t.Errorf("syncs per key %v; want once 1, fails 3, conflict 2, again 3", calls)
	}
	if !queue.ShuttingDown() {
		t.Error("queue not shut down")
	}
}
