// Package expectations remembers, per controller key, how many creations and
// deletions a controller has asked the API server for and not yet seen in its
// informer cache. Until they are seen (or expire), the cache is known to be
// stale for that key and the controller must not act on it again: this is
// what keeps a lagging Pod informer from making a second launcher Pod.
//
// It is the pattern of kube-controller-manager's ControllerExpectations,
// reduced to what kemu's controllers use.
package expectations

import (
	"sync"
	"time"
)

// DefaultTTL is how long unmet expectations block a key. An informer that
// missed an event (a watch gap) is covered by its relist long before; the TTL
// only bounds the damage of a lost event: after it the key is acted on again.
const DefaultTTL = 5 * time.Minute

type record struct {
	add, del  int
	timestamp time.Time
}

// Expectations is safe for concurrent use. The zero value is not usable; use
// New.
type Expectations struct {
	mu  sync.Mutex
	m   map[string]*record
	ttl time.Duration
	now func() time.Time
}

// New returns empty expectations whose entries expire after ttl (DefaultTTL
// when ttl <= 0).
func New(ttl time.Duration) *Expectations {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return &Expectations{m: map[string]*record{}, ttl: ttl, now: time.Now}
}

// ExpectCreations records that n creations were requested for key (replacing
// earlier expectations of key).
func (e *Expectations) ExpectCreations(key string, n int) { e.set(key, n, 0) }

// ExpectDeletions records that n deletions were requested for key (replacing
// earlier expectations of key).
func (e *Expectations) ExpectDeletions(key string, n int) { e.set(key, 0, n) }

func (e *Expectations) set(key string, add, del int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.m[key] = &record{add: add, del: del, timestamp: e.now()}
}

// CreationObserved lowers key's expected creations by one: the informer saw
// one, or the request failed and no object will come.
func (e *Expectations) CreationObserved(key string) { e.lower(key, 1, 0) }

// DeletionObserved lowers key's expected deletions by one.
func (e *Expectations) DeletionObserved(key string) { e.lower(key, 0, 1) }

func (e *Expectations) lower(key string, add, del int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if r, ok := e.m[key]; ok {
		r.add -= add
		r.del -= del
	}
}

// Satisfied reports whether the cache can be trusted for key: nothing is
// expected, everything expected was observed, or the expectations expired.
func (e *Expectations) Satisfied(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.m[key]
	if !ok {
		return true
	}
	if r.add <= 0 && r.del <= 0 {
		return true
	}
	return e.now().Sub(r.timestamp) > e.ttl
}

// Pending returns key's outstanding creations and deletions.
func (e *Expectations) Pending(key string) (add, del int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if r, ok := e.m[key]; ok {
		return max(r.add, 0), max(r.del, 0)
	}
	return 0, 0
}

// Delete forgets key (its object is gone).
func (e *Expectations) Delete(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.m, key)
}
