package launcher

import "context"

// Watcher follows domain changes from where it was created (or from the start).
type Watcher struct {
	s    *domainState
	next int // Seq of the next change to return
}

// Next returns the next change, waiting for it within ctx. If the watcher
// fell more than 1024 changes behind, it resumes at the oldest kept.
func (w *Watcher) Next(ctx context.Context) (Domain, error) {
	for {
		w.s.mu.Lock()
		if w.next < w.s.first {
			w.next = w.s.first
		}
		if i := w.next - w.s.first; i >= 0 && i < len(w.s.history) {
			d := w.s.history[i]
			w.next++
			w.s.mu.Unlock()
			return d, nil
		}
		ch := w.s.changed
		w.s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return Domain{}, ctx.Err()
		}
	}
}

// WaitFor waits until the domain satisfies f, checking the current state first.
func (w *Watcher) WaitFor(ctx context.Context, f func(Domain) bool) (Domain, error) {
	if d := w.s.get(); f(d) {
		return d, nil
	}
	for {
		d, err := w.Next(ctx)
		if err != nil || f(d) {
			return d, err
		}
	}
}

// InState selects domains in any of the states.
func InState(states ...State) func(Domain) bool {
	return func(d Domain) bool {
		for _, s := range states {
			if d.State == s {
				return true
			}
		}
		return false
	}
}
