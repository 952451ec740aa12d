package qmp

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"
)

// Event is an asynchronous message from QEMU.
type Event struct {
	// Name is the event, e.g. STOP, SHUTDOWN, DEVICE_DELETED.
	Name string
	// Data is the event's data object, decoded; nil if it has none.
	Data map[string]any
	// Timestamp is QEMU's time of the event.
	Timestamp time.Time
	// Raw is the whole message as received.
	Raw json.RawMessage
}

// String returns the data member as text, or "" (for filters and logs).
func (e Event) String(key string) string {
	v, ok := e.Data[key]
	if !ok || v == nil {
		return ""
	}
	if s, ok := v.(string); ok {
		return s
	}
	return fmt.Sprint(v)
}

func eventOf(msg *message) Event {
	ev := Event{Name: msg.Event, Raw: msg.raw}
	if len(msg.Data) > 0 {
		_ = json.Unmarshal(msg.Data, &ev.Data)
	}
	if ts := msg.Timestamp; ts != nil {
		ev.Timestamp = time.Unix(ts.Seconds, ts.Microseconds*1000)
	}
	return ev
}

// Filter selects events.
type Filter func(Event) bool

// Match selects events called name (any name if "") whose data has each
// key = value pair in kv, compared as text: Match("DEVICE_DELETED", "device", "nic1").
func Match(name string, kv ...string) Filter {
	if len(kv)%2 != 0 {
		panic("qmp.Match: odd number of key/value arguments")
	}
	return func(e Event) bool {
		if name != "" && e.Name != name {
			return false
		}
		for i := 0; i < len(kv); i += 2 {
			if e.String(kv[i]) != kv[i+1] {
				return false
			}
		}
		return true
	}
}

// AnyOf selects events with any of the names.
func AnyOf(names ...string) Filter {
	return func(e Event) bool {
		for _, n := range names {
			if e.Name == n {
				return true
			}
		}
		return false
	}
}

// DefaultSubscriptionBuffer is how many events a subscription holds before
// it drops the oldest.
const DefaultSubscriptionBuffer = 256

// backlogSize is how many events since connect a monitor keeps for
// subscriptions that ask for them.
const backlogSize = 1024

// SubscribeOption configures a subscription.
type SubscribeOption func(*Subscription)

// WithFilter keeps only the events f selects.
func WithFilter(f Filter) SubscribeOption { return func(s *Subscription) { s.filter = f } }

// WithBuffer sets how many events the subscription holds (at least 1).
func WithBuffer(n int) SubscribeOption {
	return func(s *Subscription) {
		if n > 0 {
			s.max = n
		}
	}
}

// SinceConnect replays the events received since the connection opened (up
// to the last 1024) before new ones, so nothing that happened before the
// subscription is missed.
func SinceConnect() SubscribeOption { return func(s *Subscription) { s.replay = true } }

// Subscription receives a monitor's events. The monitor's reader never waits
// for it: when its buffer is full the oldest event is dropped and the next
// call to Next reports an *EventsLostError.
type Subscription struct {
	m      *Monitor
	filter Filter
	max    int
	replay bool

	mu     sync.Mutex
	queue  []Event
	lost   uint64
	err    error
	notify chan struct{}
}

// push queues an event; called by the reader, never blocks.
func (s *Subscription) push(e Event) {
	if s.filter != nil && !s.filter(e) {
		return
	}
	s.mu.Lock()
	if s.err == nil {
		if len(s.queue) >= s.max {
			s.queue = s.queue[1:]
			s.lost++
		}
		s.queue = append(s.queue, e)
	}
	s.mu.Unlock()
	s.wake()
}

func (s *Subscription) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// end stops the subscription with err; queued events can still be read.
func (s *Subscription) end(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
	s.wake()
}

// Next returns the next event. It returns an *EventsLostError once after
// events were dropped (call again to go on), the monitor's end as an error
// wrapping ErrClosed once the queue is drained, or ctx's error.
func (s *Subscription) Next(ctx context.Context) (Event, error) {
	for {
		s.mu.Lock()
		if s.lost > 0 {
			n := s.lost
			s.lost = 0
			s.mu.Unlock()
			return Event{}, &EventsLostError{Count: n}
		}
		if len(s.queue) > 0 {
			e := s.queue[0]
			s.queue[0] = Event{}
			s.queue = s.queue[1:]
			s.mu.Unlock()
			return e, nil
		}
		err := s.err
		s.mu.Unlock()
		if err != nil {
			return Event{}, err
		}
		select {
		case <-s.notify:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// Wait returns the next event f selects, skipping others. Lost events are
// reported as in Next, since the one waited for may be among them.
func (s *Subscription) Wait(ctx context.Context, f Filter) (Event, error) {
	for {
		e, err := s.Next(ctx)
		if err != nil || f == nil || f(e) {
			return e, err
		}
	}
}

// Close ends the subscription.
func (s *Subscription) Close() {
	s.m.unsubscribe(s)
	s.end(fmt.Errorf("qmp: subscription: %w", &closedError{cause: fmt.Errorf("unsubscribed")}))
}
