package status

import "sync"

// Writes remembers, per key, the resourceVersion of the object a
// controller's last write replaced: while its cache still shows that
// version, the cache is known stale (the write's own event has not come)
// and the key is better not synced from it. Safe for concurrent use; the
// zero value is ready.
type Writes struct {
	m sync.Map // key → resourceVersion
}

// Record remembers that a write replaced resourceVersion rv of key.
func (w *Writes) Record(key, rv string) { w.m.Store(key, rv) }

// Stale says whether a cached object of key at resourceVersion rv predates
// the last write; a newer one ends the record.
func (w *Writes) Stale(key, rv string) bool {
	last, ok := w.m.Load(key)
	if !ok {
		return false
	}
	if last == rv {
		return true
	}
	w.m.Delete(key)
	return false
}

// Forget drops key's record (its object is gone).
func (w *Writes) Forget(key string) { w.m.Delete(key) }
