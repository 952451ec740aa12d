package expectations

import (
	"testing"
	"time"
)

// Each case is a sequence of steps on fresh expectations (TTL one minute);
// after each step key "ns/a" is checked, and "ns/b" must have nothing
// pending.
func TestExpectations(t *testing.T) {
	const key = "ns/a"
	type step struct {
		what      string
		do        func(e *Expectations, advance func(time.Duration))
		satisfied bool
		creations int
		deletions int
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"unknown key", []step{
			{"nothing", func(*Expectations, func(time.Duration)) {}, true, 0, 0},
			{"observing an unknown key creates nothing", func(e *Expectations, _ func(time.Duration)) {
				e.CreationObserved("ns/b")
				e.DeletionObserved("ns/b", "u1")
			}, true, 0, 0},
		}},
		{"creation", []step{
			{"expected", func(e *Expectations, _ func(time.Duration)) { e.ExpectCreations(key, 1) }, false, 1, 0},
			{"observed", func(e *Expectations, _ func(time.Duration)) { e.CreationObserved(key) }, true, 0, 0},
			{"a late duplicate observation does not go negative", func(e *Expectations, _ func(time.Duration)) {
				e.CreationObserved(key)
			}, true, 0, 0},
			{"so the next creation blocks again", func(e *Expectations, _ func(time.Duration)) { e.ExpectCreations(key, 1) }, false, 1, 0},
		}},
		{"deletions by UID", []step{
			{"expected", func(e *Expectations, _ func(time.Duration)) { e.ExpectDeletions(key, "u1", "u2") }, false, 0, 2},
			{"another object's deletion", func(e *Expectations, _ func(time.Duration)) { e.DeletionObserved(key, "u3") }, false, 0, 2},
			{"one observed", func(e *Expectations, _ func(time.Duration)) { e.DeletionObserved(key, "u1") }, false, 0, 1},
			{"both observed", func(e *Expectations, _ func(time.Duration)) { e.DeletionObserved(key, "u2") }, true, 0, 0},
		}},
		{"creation and deletion", []step{
			{"both expected", func(e *Expectations, _ func(time.Duration)) {
				e.ExpectCreations(key, 1)
				e.ExpectDeletions(key, "u1")
			}, false, 1, 1},
			{"creation observed, deletion pending", func(e *Expectations, _ func(time.Duration)) { e.CreationObserved(key) }, false, 0, 1},
		}},
		{"expiry", []step{
			{"expected", func(e *Expectations, _ func(time.Duration)) { e.ExpectDeletions(key, "u1") }, false, 0, 1},
			{"within the TTL", func(_ *Expectations, advance func(time.Duration)) { advance(59 * time.Second) }, false, 0, 1},
			{"a new expectation restarts the TTL", func(e *Expectations, advance func(time.Duration)) {
				e.ExpectCreations(key, 1)
				advance(59 * time.Second)
			}, false, 1, 1},
			{"expired", func(_ *Expectations, advance func(time.Duration)) { advance(2 * time.Minute) }, true, 0, 0},
			{"the expired record is gone", func(e *Expectations, _ func(time.Duration)) { e.ExpectCreations(key, 1) }, false, 1, 0},
		}},
		{"delete", []step{
			{"expected on both keys", func(e *Expectations, _ func(time.Duration)) {
				e.ExpectCreations(key, 1)
				e.ExpectCreations("ns/b", 1)
				e.Delete("ns/b")
			}, false, 1, 0},
			{"deleted", func(e *Expectations, _ func(time.Duration)) { e.Delete(key) }, true, 0, 0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			e := New(time.Minute, func() time.Time { return now })
			advance := func(d time.Duration) { now = now.Add(d) }
			for _, s := range tc.steps {
				s.do(e, advance)
				// Pending first: Satisfied drops an expired record.
				add, del := e.Pending(key)
				if add != s.creations || del != s.deletions {
					t.Errorf("%s: Pending = %d, %d; want %d, %d", s.what, add, del, s.creations, s.deletions)
				}
				if got := e.Satisfied(key); got != s.satisfied {
					t.Errorf("%s: Satisfied = %v, want %v", s.what, got, s.satisfied)
				}
				// Another key is never touched.
				if add, del := e.Pending("ns/b"); add != 0 || del != 0 || !e.Satisfied("ns/b") {
					t.Errorf("%s: ns/b has %d, %d pending", s.what, add, del)
				}
			}
		})
	}
}

func TestNewDefaults(t *testing.T) {
	e := New(0, nil)
	if e.ttl != DefaultTTL || e.now == nil {
		t.Errorf("New(0, nil): ttl %v, clock set %v", e.ttl, e.now != nil)
	}
}
