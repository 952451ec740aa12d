package launcher

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// The control channel: the target launcher tells the source launcher,
// over the node agents' proxies, what became of the guest on its side.
// One JSON object per line, target → source only:
//
//	{"state":"waiting"}                 on connect: the target waits for the stream
//	{"state":"running"}                 the target resumed the guest (then EOF)
//	{"state":"failed","message":"..."}  the target's QEMU is gone (then EOF)
//
// The source cancels when the channel goes away before the switchover
// (the target, its node agent or the path between them is gone: the
// switchover could not be confirmed), and resumes the guest by itself when
// the target says failed after QEMU completed. A channel that drops after
// completed changes nothing: the target may run the guest, so only the
// orchestrator (FinalizeMigration or CancelMigration) decides.
const (
	ControlWaiting = "waiting"
	ControlRunning = "running"
	ControlFailed  = "failed"
)

// controlMessage is one line of the control channel.
type controlMessage struct {
	State   string `json:"state"`
	Message string `json:"message,omitempty"`
}

const (
	// maxControlLine bounds one control line (the source reads from
	// another node).
	maxControlLine = 4096
	// maxControlConns bounds the target's concurrent control connections.
	maxControlConns = 4
	// controlHelloTimeout bounds the wait for the target's first line.
	controlHelloTimeout = 10 * time.Second
)

// controlState maps the target's domain to the control channel's state.
func controlState(d Domain) (controlMessage, bool) {
	switch {
	case d.State == StateRunning:
		return controlMessage{State: ControlRunning}, true
	case d.State == StateShutoff:
		return controlMessage{State: ControlFailed, Message: d.String()}, true
	}
	return controlMessage{State: ControlWaiting}, false
}

// serveControl listens on path (the target's control socket, 0600) and
// streams the target's state to every connection until the incoming
// migration ended; the listener closes when the domain ends or ctx is done.
func (l *Launcher) serveControl(path string) error {
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("launcher: migration control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return fmt.Errorf("launcher: migration control socket: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		// The listener lives until the domain ends.
		_, _ = l.Watch(false).WaitFor(ctx, InState(StateShutoff))
		cancel()
		ln.Close()
		_ = os.Remove(path)
	}()
	go func() {
		var wg sync.WaitGroup
		defer wg.Wait()
		slots := make(chan struct{}, maxControlConns)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			select {
			case slots <- struct{}{}:
			default:
				klog.InfoS("Refusing a migration control connection: too many", "vmi", klog.KObj(l.vmi))
				c.Close()
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				l.controlConn(ctx, c)
			}()
		}
	}()
	return nil
}

// controlConn streams the target's state on c until it is final.
func (l *Launcher) controlConn(ctx context.Context, c net.Conn) {
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	enc := json.NewEncoder(c)
	w := l.Watch(false)
	last := ""
	for d := l.Domain(); ; {
		m, final := controlState(d)
		if m.State != last {
			_ = c.SetWriteDeadline(time.Now().Add(controlHelloTimeout))
			if err := enc.Encode(m); err != nil {
				klog.V(2).InfoS("Migration control connection lost", "vmi", klog.KObj(l.vmi), "err", err)
				return
			}
			last = m.State
		}
		if final {
			return
		}
		var err error
		if d, err = w.Next(ctx); err != nil {
			return
		}
	}
}

// controlClient is the source's end of the control channel.
type controlClient struct {
	conn      net.Conn
	quit      chan struct{} // closed by close: nobody reads updates any more
	closeOnce sync.Once
	mu        sync.Mutex
	last      string // the target's last state (waiting after the hello)
	// updates gets the state after each line, and is closed when the
	// channel ends (EOF, error, or a line beyond the bound).
	updates chan controlMessage
	err     error // why it ended, once updates is closed
}

// dialControl connects to the target's control channel at path and reads
// its first line (waiting): the target exists and waits for this source.
func dialControl(ctx context.Context, path string) (*controlClient, error) {
	d := net.Dialer{Timeout: qmpConnectTimeout}
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("launcher: connecting to the migration control channel %s: %w", path, err)
	}
	cc := &controlClient{conn: c, quit: make(chan struct{}), updates: make(chan controlMessage, 1)}
	r := bufio.NewReaderSize(c, maxControlLine)
	_ = c.SetReadDeadline(time.Now().Add(controlHelloTimeout))
	first, err := readControl(r)
	if err == nil && first.State != ControlWaiting {
		err = fmt.Errorf("the target is %s, not waiting: %s", first.State, first.Message)
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("launcher: the migration control channel: %w", err)
	}
	_ = c.SetReadDeadline(time.Time{})
	cc.last = first.State
	go cc.read(r)
	return cc, nil
}

func (cc *controlClient) read(r *bufio.Reader) {
	defer close(cc.updates)
	for {
		m, err := readControl(r)
		if err != nil {
			cc.mu.Lock()
			cc.err = err
			cc.mu.Unlock()
			return
		}
		cc.mu.Lock()
		cc.last = m.State
		cc.mu.Unlock()
		select {
		case cc.updates <- m:
		case <-cc.quit:
			return
		}
		if m.State != ControlWaiting {
			return // final: the target says nothing more
		}
	}
}

// readControl reads one bounded control line.
func readControl(r *bufio.Reader) (controlMessage, error) {
	line, err := r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return controlMessage{}, fmt.Errorf("a control line longer than %d bytes", maxControlLine)
	}
	if err != nil {
		return controlMessage{}, err
	}
	var m controlMessage
	if err := json.Unmarshal(line, &m); err != nil {
		return controlMessage{}, fmt.Errorf("a malformed control line: %w", err)
	}
	switch m.State {
	case ControlWaiting, ControlRunning, ControlFailed:
	default:
		return controlMessage{}, fmt.Errorf("an unknown control state %q", m.State)
	}
	return m, nil
}

// targetMayRun says whether the target may run the guest now or soon:
// it said running, or it still waits on a live channel (it resumes the
// guest as soon as QEMU completes). Only a target that said failed, or
// whose channel went away, leaves the choice to resume the source.
func (cc *controlClient) targetMayRun() bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.last == ControlRunning || cc.last == ControlWaiting && cc.err == nil
}

// ended says why the channel is gone (nil while it is up, or after a
// final state).
func (cc *controlClient) ended() error {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.err
}

func (cc *controlClient) close() {
	if cc != nil {
		cc.closeOnce.Do(func() {
			close(cc.quit)
			cc.conn.Close()
		})
	}
}
