package qmp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	goqmp "github.com/digitalocean/go-qemu/qmp"
)

// DefaultConnectTimeout bounds Connect (greeting + qmp_capabilities).
const DefaultConnectTimeout = 10 * time.Second

// Greeting is what QEMU says when a client connects.
type Greeting struct {
	QMP struct {
		Version      VersionInfo `json:"version"`
		Capabilities []string    `json:"capabilities"`
	} `json:"QMP"`
}

// Monitor is a QMP connection. It implements go-qemu's qmp.Monitor.
type Monitor struct {
	k              *conn
	connectTimeout time.Duration

	greetingOnce sync.Once
	greetingCh   chan struct{}
	greeting     Greeting

	connectMu sync.Mutex
	connected bool

	subMu       sync.Mutex
	subs        map[*Subscription]struct{}
	backlog     []Event
	backlogLost uint64
}

var _ goqmp.Monitor = (*Monitor)(nil)

// Option configures a Monitor.
type Option func(*Monitor)

// WithConnectTimeout bounds Connect (used when no context is given).
func WithConnectTimeout(d time.Duration) Option { return func(m *Monitor) { m.connectTimeout = d } }

// WithMaxMessageSize bounds one message from QEMU.
func WithMaxMessageSize(n int) Option { return func(m *Monitor) { m.k.maxSize = n } }

// New wraps an open connection to a QMP socket. Nothing is read or sent
// until Connect.
func New(c net.Conn, opts ...Option) *Monitor {
	m := &Monitor{
		k:              newConn(c, false, 0),
		connectTimeout: DefaultConnectTimeout,
		greetingCh:     make(chan struct{}),
		subs:           map[*Subscription]struct{}{},
	}
	for _, o := range opts {
		o(m)
	}
	m.k.onEvent = m.dispatch
	m.k.onClose = m.endSubscriptions
	m.k.onGreeting = func(msg *message) {
		m.greetingOnce.Do(func() {
			_ = json.Unmarshal(msg.raw, &m.greeting)
			close(m.greetingCh)
		})
	}
	return m
}

// Dial connects to the QMP unix socket at path (waiting within ctx for it to
// appear or to be free) and negotiates capabilities, all within ctx.
func Dial(ctx context.Context, path string, opts ...Option) (*Monitor, error) {
	c, err := dialUnix(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("qmp: connecting to %s: %w", path, err)
	}
	m := New(c, opts...)
	if err := m.ConnectContext(ctx); err != nil {
		return nil, err
	}
	return m, nil
}

// Connect reads QEMU's greeting and negotiates capabilities within the
// connect timeout. It implements go-qemu's qmp.Monitor.
func (m *Monitor) Connect() error {
	ctx, cancel := context.WithTimeout(context.Background(), m.connectTimeout)
	defer cancel()
	return m.ConnectContext(ctx)
}

// ConnectContext reads QEMU's greeting and negotiates capabilities within
// ctx. Events that arrive meanwhile are kept for subscriptions (SinceConnect).
// On failure the connection is closed.
func (m *Monitor) ConnectContext(ctx context.Context) error {
	m.connectMu.Lock()
	defer m.connectMu.Unlock()
	if m.connected {
		return nil
	}
	m.k.start()
	select {
	case <-m.greetingCh:
	case <-m.k.done:
		return fmt.Errorf("qmp: waiting for the greeting: %w", m.k.Err())
	case <-ctx.Done():
		m.k.fail(fmt.Errorf("no greeting from QEMU: %w", ctx.Err()))
		return fmt.Errorf("qmp: waiting for the greeting: %w", ctx.Err())
	}
	if _, err := m.k.call(ctx, "qmp_capabilities", nil, nil, nil); err != nil {
		m.k.fail(fmt.Errorf("capabilities negotiation failed: %w", err))
		return err
	}
	m.connected = true
	return nil
}

// Greeting returns QEMU's greeting (version, capabilities) after Connect.
func (m *Monitor) Greeting() Greeting { return m.greeting }

// Disconnect closes the connection; pending and later calls fail. It
// implements go-qemu's qmp.Monitor.
func (m *Monitor) Disconnect() error { return m.k.close() }

// Close is Disconnect.
func (m *Monitor) Close() error { return m.k.close() }

// Done is closed when the connection ends.
func (m *Monitor) Done() <-chan struct{} { return m.k.done }

// Err returns why the connection ended, or nil.
func (m *Monitor) Err() error { return m.k.Err() }

// Execute runs cmd with args (nil for none) and decodes the return value
// into reply (nil to ignore it). A QEMU error reply is an *Error.
func (m *Monitor) Execute(ctx context.Context, cmd string, args, reply any) error {
	return m.ExecuteWithFiles(ctx, cmd, args, reply)
}

// ExecuteWithFiles is Execute, passing files to QEMU with SCM_RIGHTS in the
// same message (for getfd and add-fd). The caller keeps its files.
func (m *Monitor) ExecuteWithFiles(ctx context.Context, cmd string, args, reply any, files ...*os.File) error {
	msg, err := m.k.call(ctx, cmd, args, files, nil)
	if err != nil {
		return err
	}
	if reply != nil && len(msg.Return) > 0 {
		if err := json.Unmarshal(msg.Return, reply); err != nil {
			return fmt.Errorf("qmp: %s: decoding the reply: %w", cmd, err)
		}
	}
	return nil
}

// ExecuteWait subscribes to events f selects, runs the command, and waits
// for the first such event: the race-free way to wait for what a command
// causes (device_del and DEVICE_DELETED, system_powerdown and SHUTDOWN).
func (m *Monitor) ExecuteWait(ctx context.Context, cmd string, args, reply any, f Filter) (Event, error) {
	sub := m.Subscribe(WithFilter(f), WithBuffer(16))
	defer sub.Close()
	if err := m.Execute(ctx, cmd, args, reply); err != nil {
		return Event{}, err
	}
	for {
		e, err := sub.Next(ctx)
		var lost *EventsLostError
		if errors.As(err, &lost) {
			continue // only matching events are queued: any of them will do
		}
		return e, err
	}
}

// RunRaw sends one QMP command given as JSON text, as typed in a debug
// shell, and returns QEMU's reply as JSON text, error replies included. The
// command's own "id", if any, is given back in the reply.
func (m *Monitor) RunRaw(ctx context.Context, command []byte) ([]byte, error) {
	var obj map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(command))
	dec.UseNumber()
	if err := dec.Decode(&obj); err != nil {
		return nil, fmt.Errorf("qmp: the command is not a JSON object: %w", err)
	}
	var name string
	if err := json.Unmarshal(obj["execute"], &name); err != nil || name == "" {
		return nil, errors.New(`qmp: the command has no "execute" member`)
	}
	userID, hadID := obj["id"]
	id := m.k.nextID()
	obj["id"], _ = json.Marshal(id)
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	msg, err := m.k.roundTrip(ctx, name, id, append(b, '\n'), nil, nil)
	var qe *Error
	if err != nil && !errors.As(err, &qe) {
		return nil, err
	}
	var reply map[string]json.RawMessage
	if err := json.Unmarshal(msg.raw, &reply); err != nil {
		return nil, err
	}
	if hadID {
		reply["id"] = userID
	} else {
		delete(reply, "id")
	}
	return json.Marshal(reply)
}

// Run sends a command given as JSON and returns QEMU's reply as JSON; an
// error reply is returned as an error. It implements go-qemu's qmp.Monitor
// (there is no context: it waits as long as the connection lives).
func (m *Monitor) Run(command []byte) ([]byte, error) {
	out, err := m.RunRaw(context.Background(), command)
	if err != nil {
		return nil, err
	}
	var r struct {
		Error *Error `json:"error"`
	}
	if err := json.Unmarshal(out, &r); err == nil && r.Error != nil {
		var c struct {
			Execute string `json:"execute"`
		}
		_ = json.Unmarshal(command, &c)
		r.Error.Command = c.Execute
		return nil, r.Error
	}
	return out, nil
}

// Subscribe starts receiving events. Close the subscription when done.
func (m *Monitor) Subscribe(opts ...SubscribeOption) *Subscription {
	s := &Subscription{m: m, max: DefaultSubscriptionBuffer, notify: make(chan struct{}, 1)}
	for _, o := range opts {
		o(s)
	}
	m.subMu.Lock()
	if s.replay {
		if m.backlogLost > 0 {
			s.lost = m.backlogLost
		}
		for _, e := range m.backlog {
			s.push(e)
		}
	}
	if err := m.k.Err(); err != nil {
		s.end(err)
	} else {
		m.subs[s] = struct{}{}
	}
	m.subMu.Unlock()
	return s
}

func (m *Monitor) unsubscribe(s *Subscription) {
	m.subMu.Lock()
	delete(m.subs, s)
	m.subMu.Unlock()
}

// dispatch fans an event out; called by the reader only.
func (m *Monitor) dispatch(msg *message) {
	e := eventOf(msg)
	m.subMu.Lock()
	if len(m.backlog) >= backlogSize {
		m.backlog = m.backlog[1:]
		m.backlogLost++
	}
	m.backlog = append(m.backlog, e)
	for s := range m.subs {
		s.push(e)
	}
	m.subMu.Unlock()
}

// endSubscriptions is called once, when the connection ends.
func (m *Monitor) endSubscriptions(err error) {
	m.subMu.Lock()
	for s := range m.subs {
		s.end(err)
	}
	m.subs = map[*Subscription]struct{}{}
	m.subMu.Unlock()
}

// EventsLost is the name of the synthetic event Events sends when its
// subscription fell behind; its data has "count".
const EventsLost = "KEMU_EVENTS_LOST"

// Events returns a channel of every event since the connection opened and
// on, closed when ctx ends or the connection does. It implements go-qemu's
// qmp.Monitor. A reader that falls behind more than 256 events gets an
// EventsLost event instead of the ones dropped.
func (m *Monitor) Events(ctx context.Context) (<-chan goqmp.Event, error) {
	if err := m.k.Err(); err != nil {
		return nil, err
	}
	sub := m.Subscribe(SinceConnect())
	ch := make(chan goqmp.Event)
	go func() {
		defer close(ch)
		defer sub.Close()
		for {
			e, err := sub.Next(ctx)
			var out goqmp.Event
			var lost *EventsLostError
			switch {
			case errors.As(err, &lost):
				out.Event = EventsLost
				out.Data = map[string]any{"count": lost.Count}
			case err != nil:
				return
			default:
				out.Event, out.Data = e.Name, e.Data
				out.Timestamp.Seconds = e.Timestamp.Unix()
				out.Timestamp.Microseconds = int64(e.Timestamp.Nanosecond() / 1000)
			}
			select {
			case ch <- out:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}
