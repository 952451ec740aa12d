package vm

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// expectations remember, per VM key, the VMI creates and deletes this
// controller sent that its informer has not reported yet. While any is
// pending the VM is not acted on: its cache may still lack the VMI just
// created (and would create a second) or still show the VMI just deleted
// (and would delete the next one). A record older than ttl is dropped, in
// case an event was lost.
type expectations struct {
	mu      sync.Mutex
	now     func() time.Time
	ttl     time.Duration
	records map[string]*expectation
}

type expectation struct {
	adds int
	dels map[types.UID]struct{}
	at   time.Time
}

func newExpectations(now func() time.Time, ttl time.Duration) *expectations {
	return &expectations{now: now, ttl: ttl, records: map[string]*expectation{}}
}

func (e *expectations) record(key string) *expectation {
	r := e.records[key]
	if r == nil {
		r = &expectation{dels: map[types.UID]struct{}{}}
		e.records[key] = r
	}
	r.at = e.now()
	return r
}

// expectCreation records a create about to be sent.
func (e *expectations) expectCreation(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.record(key).adds++
}

// creationObserved lowers the pending creates (seen, or the create failed).
func (e *expectations) creationObserved(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if r := e.records[key]; r != nil && r.adds > 0 {
		r.adds--
	}
}

// expectDeletion records the delete of VMI uid about to be sent.
func (e *expectations) expectDeletion(key string, uid types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.record(key).dels[uid] = struct{}{}
}

// deletionObserved forgets the delete of uid (seen, or the delete failed).
func (e *expectations) deletionObserved(key string, uid types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if r := e.records[key]; r != nil {
		delete(r.dels, uid)
	}
}

// satisfied says whether nothing is pending for key (or it expired).
func (e *expectations) satisfied(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.records[key]
	if r == nil || (r.adds <= 0 && len(r.dels) == 0) {
		return true
	}
	if e.now().Sub(r.at) > e.ttl {
		delete(e.records, key)
		return true
	}
	return false
}

// pending reports whether a create or a delete is pending for key.
func (e *expectations) pending(key string) (create, del bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.records[key]
	if r == nil || e.now().Sub(r.at) > e.ttl {
		return false, false
	}
	return r.adds > 0, len(r.dels) > 0
}

// forget drops key's record (its VM is gone).
func (e *expectations) forget(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.records, key)
}
