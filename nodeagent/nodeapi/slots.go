package nodeapi

import (
	"sync"
	"time"
)

// noDeadline clears a hijacked connection's deadlines.
var noDeadline time.Time

// streamSlots holds the one stream of each verb per VMI: acquiring a slot
// that is taken ends the older stream (its stop) and waits for it to let
// go, so the launcher never serves two of them.
type streamSlots struct {
	mu     sync.Mutex
	slots  map[slotKey]*slot
	closed bool
	wg     sync.WaitGroup
}

type slot struct {
	stop     func()
	released chan struct{}
}

// acquire takes key's slot for a stream ended by stop; release gives it
// back. False once closed.
func (s *streamSlots) acquire(key slotKey, stop func()) (release func(), ok bool) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, false
		}
		old := s.slots[key]
		if old == nil {
			mine := &slot{stop: stop, released: make(chan struct{})}
			s.slots[key] = mine
			s.wg.Add(1)
			s.mu.Unlock()
			return func() {
				s.mu.Lock()
				if s.slots[key] == mine {
					delete(s.slots, key)
				}
				s.mu.Unlock()
				close(mine.released)
				s.wg.Done()
			}, true
		}
		s.mu.Unlock()
		old.stop()
		<-old.released
	}
}

// wait refuses new streams and waits for the running ones to end (their
// contexts are the server's, already cancelled).
func (s *streamSlots) wait() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.wg.Wait()
}
