package qmp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// DefaultMaxMessageSize bounds one message from QEMU. QEMU 7.2's largest
// reply (query-qmp-schema) is ~207 KB; the bound only stops a runaway peer.
const DefaultMaxMessageSize = 64 << 20

// MaxAgentLineSize bounds one line from the guest agent channel. The guest
// writes that channel, so it is hostile input: a longer line is dropped
// without being buffered whole, the connection is reset (the next Agent
// call dials again) and AgentLinesDropped counts it. qemu-ga's largest
// replies kemu asks for (guest-info, guest-network-get-interfaces) are a few
// KiB; guest-exec-status output over ~750 KiB (base64) does not fit.
const MaxAgentLineSize = 1 << 20

// ErrLineTooLong is the cause (errors.Is) of a connection ended because
// the peer sent a line over the limit.
var ErrLineTooLong = errors.New("line too long")

// agentLinesDropped counts guest agent lines over MaxAgentLineSize.
var agentLinesDropped atomic.Uint64

// AgentLinesDropped is how many guest agent lines over MaxAgentLineSize
// this process dropped (each reset its connection). Process-wide: a
// launcher runs one VM.
func AgentLinesDropped() uint64 { return agentLinesDropped.Load() }

// message is anything QEMU or the guest agent sends.
type message struct {
	QMP       json.RawMessage `json:"QMP"`
	Event     string          `json:"event"`
	Data      json.RawMessage `json:"data"`
	Timestamp *struct {
		Seconds      int64 `json:"seconds"`
		Microseconds int64 `json:"microseconds"`
	} `json:"timestamp"`
	Return json.RawMessage `json:"return"`
	Error  *Error          `json:"error"`
	ID     json.RawMessage `json:"id"`

	raw []byte
}

func (m *message) isReply() bool { return m.Return != nil || m.Error != nil }

// pending is a command waiting for its reply.
type pending struct {
	reply chan *message // buffered, 1
	// accept, if set, decides whether an id-less reply (guest agent) is
	// this command's.
	accept func(*message) bool
}

// conn is the engine under Monitor and Agent: one reader goroutine, replies
// matched to commands, writes serialised, one way to end.
type conn struct {
	c       net.Conn
	name    string // for messages: the socket path
	agent   bool   // guest agent framing: 0xFF sync bytes, tolerant of junk
	maxSize int

	onEvent    func(*message) // called by the reader; must not block
	onGreeting func(*message)
	onClose    func(error) // called once, after the connection ended

	writeMu  sync.Mutex
	idPrefix string // random per connection: a stale reply to an earlier client never matches
	ids      atomic.Uint64

	mu      sync.Mutex
	pending map[string]*pending
	order   []string // ids in the order sent, for id-less agent replies
	err     error    // why the connection ended; set once
	done    chan struct{}
}

func newConn(c net.Conn, agent bool, maxSize int) *conn {
	if maxSize <= 0 {
		maxSize = DefaultMaxMessageSize
	}
	name := "qmp"
	if c.RemoteAddr() != nil && c.RemoteAddr().String() != "" {
		name = c.RemoteAddr().String()
	}
	return &conn{c: c, name: name, agent: agent, maxSize: maxSize,
		idPrefix: fmt.Sprintf("kemu-%08x-", rand.Uint32()),
		pending:  map[string]*pending{}, done: make(chan struct{})}
}

// start runs the reader. Callbacks must be set before.
func (k *conn) start() { go k.readLoop() }

// fail ends the connection for good with cause; the first cause wins.
func (k *conn) fail(cause error) {
	k.mu.Lock()
	if k.err != nil {
		k.mu.Unlock()
		return
	}
	k.err = &closedError{cause: cause}
	close(k.done)
	k.pending = map[string]*pending{}
	k.order = nil
	err := k.err
	k.mu.Unlock()
	_ = k.c.Close()
	if k.onClose != nil {
		k.onClose(err)
	}
}

// Err returns why the connection ended, or nil while it is up.
func (k *conn) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.err
}

func (k *conn) readLoop() {
	r := bufio.NewReaderSize(k.c, 64<<10)
	for {
		line, err := readMessage(r, k.maxSize)
		if err != nil {
			switch {
			case errors.Is(err, ErrLineTooLong) && k.agent:
				n := agentLinesDropped.Add(1)
				klog.InfoS("Dropped an oversize line from the guest agent; resetting the connection",
					"socket", k.name, "limit", k.maxSize, "droppedSoFar", n)
				err = fmt.Errorf("the guest agent sent a line over %d bytes: dropped, connection reset (%w)", k.maxSize, ErrLineTooLong)
			case errors.Is(err, io.EOF):
				err = fmt.Errorf("%s closed the connection", k.name)
			case errors.Is(err, net.ErrClosed):
				err = errors.New("closed by the client")
			default:
				err = fmt.Errorf("reading from %s: %w", k.name, err)
			}
			k.fail(err)
			return
		}
		if k.agent {
			// guest-sync-delimited replies start with 0xFF; a reconnecting
			// client may also see the tail of an earlier reply.
			line = bytes.TrimLeft(line, "\xff")
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		msg := &message{raw: line}
		if err := json.Unmarshal(line, msg); err != nil || !(msg.QMP != nil || msg.Event != "" || msg.isReply()) {
			if err == nil {
				err = errors.New("no QMP, event, return or error member")
			}
			pe := &ProtocolError{Line: truncate(line, 200), Err: err}
			if k.agent {
				klog.V(2).InfoS("Skipping junk from the guest agent", "socket", k.name, "err", pe)
				continue
			}
			k.fail(pe)
			return
		}
		switch {
		case msg.QMP != nil:
			if k.onGreeting != nil {
				k.onGreeting(msg)
			}
		case msg.Event != "":
			if k.onEvent != nil {
				k.onEvent(msg)
			}
		default:
			k.deliver(msg)
		}
	}
}

// readMessage reads one line of any length up to max bytes. Nothing beyond
// max is buffered: a longer line fails with ErrLineTooLong once max bytes
// without a newline were seen.
func readMessage(r *bufio.Reader, max int) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(buf)+len(chunk) > max {
			return nil, fmt.Errorf("message longer than %d bytes: %w", max, ErrLineTooLong)
		}
		if err == nil {
			if buf == nil {
				return append([]byte(nil), chunk...), nil
			}
			return appendCapped(buf, chunk, max), nil
		}
		buf = appendCapped(buf, chunk, max)
		if !errors.Is(err, bufio.ErrBufferFull) {
			if len(bytes.TrimSpace(buf)) > 0 && errors.Is(err, io.EOF) {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}

// appendCapped appends chunk to buf, doubling its capacity but never past
// limit (the caller checked that the result fits), so a line of the
// largest size costs at most twice the limit in allocations whatever the
// runtime's own growth policy.
func appendCapped(buf, chunk []byte, limit int) []byte {
	if need := len(buf) + len(chunk); need > cap(buf) {
		grown := make([]byte, len(buf), min(limit, max(need, 2*cap(buf))))
		copy(grown, buf)
		buf = grown
	}
	return append(buf, chunk...)
}

// deliver hands a reply to the command it answers.
func (k *conn) deliver(msg *message) {
	k.mu.Lock()
	var p *pending
	var id string
	if len(msg.ID) > 0 {
		id = idString(msg.ID)
		if q := k.pending[id]; q != nil && (q.accept == nil || q.accept(msg)) {
			p = q
		}
	} else if k.agent {
		// Some guest agent replies carry no id: they answer the oldest
		// command still waiting, if it accepts them.
		for _, cand := range k.order {
			if q := k.pending[cand]; q != nil {
				if q.accept == nil || q.accept(msg) {
					p, id = q, cand
				}
				break
			}
		}
	}
	if p != nil {
		k.forget(id)
	}
	k.mu.Unlock()
	if p == nil {
		klog.V(2).InfoS("Dropping a reply nobody waits for", "socket", k.name, "id", string(msg.ID), "reply", truncate(msg.raw, 200))
		return
	}
	p.reply <- msg
}

// forget removes a pending command; k.mu must be held.
func (k *conn) forget(id string) {
	delete(k.pending, id)
	for i, o := range k.order {
		if o == id {
			k.order = append(k.order[:i], k.order[i+1:]...)
			break
		}
	}
}

// idString normalises a JSON id (string or number) to a map key.
func idString(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(bytes.TrimSpace(raw))
}

// dialUnix connects to a unix socket, retrying within ctx while the socket
// is not there yet (QEMU still starting) or busy (QEMU's chardev sockets take
// one client at a time and may refuse one that comes right after another).
func dialUnix(ctx context.Context, path string) (net.Conn, error) {
	var d net.Dialer
	wait := 5 * time.Millisecond
	for {
		c, err := d.DialContext(ctx, "unix", path)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ECONNREFUSED) && !errors.Is(err, unix.EAGAIN) {
			return nil, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-t.C:
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}

// nextID returns a fresh command id.
func (k *conn) nextID() string { return k.idPrefix + strconv.FormatUint(k.ids.Add(1), 10) }

// request is a command on the wire.
type request struct {
	Execute   string `json:"execute"`
	Arguments any    `json:"arguments,omitempty"`
	ID        string `json:"id,omitempty"`
}

// call sends cmd with args (and files, by SCM_RIGHTS) and waits for the
// reply. A QMP error reply is returned as *Error together with the message.
func (k *conn) call(ctx context.Context, cmd string, args any, files []*os.File, accept func(*message) bool) (*message, error) {
	id := k.nextID()
	b, err := json.Marshal(request{Execute: cmd, Arguments: args, ID: id})
	if err != nil {
		return nil, fmt.Errorf("qmp: %s: encoding arguments: %w", cmd, err)
	}
	return k.roundTrip(ctx, cmd, id, append(b, '\n'), files, accept)
}

// roundTrip registers id, writes b and waits for the reply to id.
func (k *conn) roundTrip(ctx context.Context, cmd, id string, b []byte, files []*os.File, accept func(*message) bool) (*message, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("qmp: %s: not sent: %w", cmd, err)
	}
	p := &pending{reply: make(chan *message, 1), accept: accept}
	k.mu.Lock()
	if k.err != nil {
		err := k.err
		k.mu.Unlock()
		return nil, fmt.Errorf("qmp: %s: %w", cmd, err)
	}
	k.pending[id] = p
	k.order = append(k.order, id)
	k.mu.Unlock()

	if err := k.write(ctx, b, files); err != nil {
		k.mu.Lock()
		k.forget(id)
		k.mu.Unlock()
		return nil, fmt.Errorf("qmp: %s: %w", cmd, err)
	}
	select {
	case msg := <-p.reply:
		if msg.Error != nil {
			e := *msg.Error
			e.Command = cmd
			return msg, &e
		}
		return msg, nil
	case <-k.done:
		return nil, fmt.Errorf("qmp: %s: %w", cmd, k.Err())
	case <-ctx.Done():
		k.mu.Lock()
		k.forget(id)
		k.mu.Unlock()
		return nil, fmt.Errorf("qmp: %s: no reply: %w", cmd, ctx.Err())
	}
}

// post sends cmd with args and returns at once: the channel gets the
// reply with its id, if one ever comes (guest-shutdown answers only when it
// fails). The command is matched by id only, never to an id-less reply.
// forget must be called when the reply is no longer wanted.
func (k *conn) post(ctx context.Context, cmd string, args any) (reply <-chan *message, forget func(), err error) {
	id := k.nextID()
	b, err := json.Marshal(request{Execute: cmd, Arguments: args, ID: id})
	if err != nil {
		return nil, nil, fmt.Errorf("qmp: %s: encoding arguments: %w", cmd, err)
	}
	p := &pending{reply: make(chan *message, 1)}
	k.mu.Lock()
	if k.err != nil {
		err := k.err
		k.mu.Unlock()
		return nil, nil, fmt.Errorf("qmp: %s: %w", cmd, err)
	}
	k.pending[id] = p
	k.mu.Unlock()
	forget = func() {
		k.mu.Lock()
		k.forget(id)
		k.mu.Unlock()
	}
	if err := k.write(ctx, append(b, '\n'), nil); err != nil {
		forget()
		return nil, nil, fmt.Errorf("qmp: %s: %w", cmd, err)
	}
	return p.reply, forget, nil
}

// write sends b (with files as SCM_RIGHTS) in one piece. A write cut short
// leaves the stream unusable, so it ends the connection.
func (k *conn) write(ctx context.Context, b []byte, files []*os.File) error {
	k.writeMu.Lock()
	defer k.writeMu.Unlock()
	select {
	case <-k.done:
		return k.Err()
	default:
	}
	dl, _ := ctx.Deadline()
	_ = k.c.SetWriteDeadline(dl)
	// A cancelled ctx interrupts the write. The callback must be finished
	// before the next writer sets its own deadline, or it could cut that
	// writer's write short.
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = k.c.SetWriteDeadline(time.Now())
		close(fired)
	})
	defer func() {
		if !stop() {
			<-fired
		}
	}()

	var n int
	var err error
	if len(files) > 0 {
		uc, ok := k.c.(*net.UnixConn)
		if !ok {
			return errors.New("passing file descriptors needs a unix socket")
		}
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		n, _, err = uc.WriteMsgUnix(b, unix.UnixRights(fds...), nil)
		if err == nil && n < len(b) {
			var m int
			m, err = uc.Write(b[n:])
			n += m
		}
	} else {
		n, err = k.c.Write(b)
	}
	switch {
	case err == nil:
		return nil
	case n == 0 && ctx.Err() != nil:
		return ctx.Err() // nothing written: the stream is intact
	case n > 0:
		k.fail(fmt.Errorf("write to %s cut short: %w", k.name, err))
	default:
		k.fail(fmt.Errorf("writing to %s: %w", k.name, err))
	}
	return k.Err()
}

// close ends the connection from our side.
func (k *conn) close() error {
	k.fail(errors.New("closed by the client"))
	return nil
}

func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}
