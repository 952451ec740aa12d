// Package expectations remembers, per controller key, the creations and
// deletions a controller has asked the API server for and not yet seen in
// its informer cache. Until they are seen (or expire), the cache is known to
// be stale for that key and the controller must not act on it again: this is
// what keeps a lagging Pod informer from making a second launcher Pod, and a
// lagging VMI informer from making a second VMI or deleting the next one.
//
// It is the pattern of kube-controller-manager's
// UIDTrackingControllerExpectations, reduced to what kemu's controllers use:
// creations are counted, deletions are tracked by the deleted object's UID
// (so another object's deletion does not count).
package expectations

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// DefaultTTL is how long unmet expectations block a key. An informer that
// missed an event (a watch gap) is covered by its relist long before; the TTL
// only bounds the damage of a lost event: after it the key is acted on again.
const DefaultTTL = 5 * time.Minute

type record struct {
	adds int
	dels map[types.UID]struct{}
	at   time.Time
}

// Expectations is safe for concurrent use. The zero value is not usable; use
// New.
type Expectations struct {
	mu      sync.Mutex
	records map[string]*record
	ttl     time.Duration
	now     func() time.Time
}

// New returns empty expectations whose records expire ttl after their last
// expectation (DefaultTTL when ttl <= 0), on the clock now (time.Now when
// nil).
func New(ttl time.Duration, now func() time.Time) *Expectations {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	if now == nil {
		now = time.Now
	}
	return &Expectations{records: map[string]*record{}, ttl: ttl, now: now}
}

// record returns key's record, created if needed, its expiry restarted.
func (e *Expectations) record(key string) *record {
	r := e.records[key]
	if r == nil {
		r = &record{dels: map[types.UID]struct{}{}}
		e.records[key] = r
	}
	r.at = e.now()
	return r
}

// ExpectCreations records that n more creations are about to be requested
// for key.
func (e *Expectations) ExpectCreations(key string, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.record(key).adds += n
}

// CreationObserved lowers key's expected creations by one (never below
// zero): the informer saw one, or the request failed and no object will
// come.
func (e *Expectations) CreationObserved(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if r := e.records[key]; r != nil && r.adds > 0 {
		r.adds--
	}
}

// ExpectDeletions records that the objects with these UIDs are about to be
// deleted for key.
func (e *Expectations) ExpectDeletions(key string, uids ...types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.record(key)
	for _, uid := range uids {
		r.dels[uid] = struct{}{}
	}
}

// DeletionObserved forgets the expected deletion of uid: the informer saw
// it, or the request failed and no event will come. Another object's
// deletion changes nothing.
func (e *Expectations) DeletionObserved(key string, uid types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if r := e.records[key]; r != nil {
		delete(r.dels, uid)
	}
}

// Satisfied reports whether the cache can be trusted for key: nothing is
// expected, everything expected was observed, or the expectations expired
// (the record is dropped then).
func (e *Expectations) Satisfied(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.records[key]
	if r == nil || (r.adds == 0 && len(r.dels) == 0) {
		return true
	}
	if e.now().Sub(r.at) > e.ttl {
		delete(e.records, key)
		return true
	}
	return false
}

// Pending returns key's outstanding creations and deletions (none once
// they expired).
func (e *Expectations) Pending(key string) (creations, deletions int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.records[key]
	if r == nil || e.now().Sub(r.at) > e.ttl {
		return 0, 0
	}
	return r.adds, len(r.dels)
}

// Delete forgets key (its object is gone).
func (e *Expectations) Delete(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.records, key)
}
