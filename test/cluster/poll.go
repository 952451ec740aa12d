package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// StopPolling, returned by Poll's function, ends Poll early with Err.
type StopPolling struct{ Err error }

func (s StopPolling) Error() string { return s.Err.Error() }

// Poll calls f every 100 ms until it returns nil or a StopPolling error, or
// ctx ends (then the error says so and what f said last).
func Poll(ctx context.Context, f func() error) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		err := f()
		if err == nil {
			return nil
		}
		var sp StopPolling
		if errors.As(err, &sp) {
			return sp.Err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w; last: %v", ctx.Err(), err)
		case <-tick.C:
		}
	}
}
