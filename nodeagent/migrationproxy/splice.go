package migrationproxy

import (
	"errors"
	"io"
	"net"
	"sync"
)

// copyBufferSize is the buffer of each direction of a splice. Go's TLS
// has no kernel TLS, so the data path is read/write through user space;
// a large buffer keeps it to few syscalls per TLS record batch (a TLS
// record holds at most 16 KiB; unix-socket reads and TLS writes take
// the whole buffer).
const copyBufferSize = 256 << 10

var bufferPool = sync.Pool{New: func() any {
	b := make([]byte, copyBufferSize)
	return &b
}}

// halfConn is a connection whose write side can be closed alone:
// *tls.Conn (close_notify) and *net.UnixConn (shutdown(SHUT_WR)).
type halfConn interface {
	net.Conn
	CloseWrite() error
}

// splice copies a→b and b→a until both directions ended. A direction
// that reaches EOF half-closes its destination, so the peer sees EOF
// while the other direction goes on (QEMU's stream semantics); an error in
// either direction closes both connections. Both are closed on return.
func splice(a, b halfConn) (aToB, bToA int64, err error) {
	type result struct {
		n   int64
		err error
		ab  bool
	}
	done := make(chan result, 2)
	go func() { n, err := copyHalf(b, a); done <- result{n, err, true} }()
	go func() { n, err := copyHalf(a, b); done <- result{n, err, false} }()
	var errs []error
	for range 2 {
		r := <-done
		if r.ab {
			aToB = r.n
		} else {
			bToA = r.n
		}
		if r.err != nil {
			errs = append(errs, r.err)
			a.Close()
			b.Close()
		}
	}
	a.Close()
	b.Close()
	return aToB, bToA, errors.Join(errs...)
}

// copyHalf copies src to dst through a pooled buffer, then half-closes dst.
func copyHalf(dst, src halfConn) (int64, error) {
	bp := bufferPool.Get().(*[]byte)
	defer bufferPool.Put(bp)
	// readerOnly/writerOnly hide ReadFrom/WriteTo so that io.CopyBuffer
	// uses this buffer rather than a 32 KiB one of its own.
	n, err := io.CopyBuffer(writerOnly{dst}, readerOnly{src}, *bp)
	if err != nil {
		return n, err
	}
	return n, dst.CloseWrite()
}

type readerOnly struct{ io.Reader }
type writerOnly struct{ io.Writer }

// tracker holds the active connections of a Server or Source so that
// Unregister and Close can end them.
type tracker struct {
	mu     sync.Mutex
	closed bool
	byUID  map[string]map[*session]struct{}
}

// session is one accepted connection and, once dialed, its peer.
type session struct {
	uid   string
	mu    sync.Mutex
	conns []io.Closer
	ended bool
}

// attach adds c to the session; if the session was already ended, c is
// closed at once and false returned.
func (s *session) attach(c io.Closer) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		c.Close()
		return false
	}
	s.conns = append(s.conns, c)
	return true
}

func (s *session) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
	for _, c := range s.conns {
		c.Close()
	}
}

// start tracks a new session for uid holding c; after Close it closes c
// and returns nil.
func (t *tracker) start(uid string, c io.Closer) *session {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		c.Close()
		return nil
	}
	if t.byUID == nil {
		t.byUID = map[string]map[*session]struct{}{}
	}
	s := &session{uid: uid, conns: []io.Closer{c}}
	if t.byUID[uid] == nil {
		t.byUID[uid] = map[*session]struct{}{}
	}
	t.byUID[uid][s] = struct{}{}
	return s
}

// setUID moves s under uid (a server learns the UID from the header).
func (t *tracker) setUID(s *session, uid string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.byUID[s.uid], s)
	if len(t.byUID[s.uid]) == 0 {
		delete(t.byUID, s.uid)
	}
	s.uid = uid
	if t.byUID[uid] == nil {
		t.byUID[uid] = map[*session]struct{}{}
	}
	t.byUID[uid][s] = struct{}{}
}

func (t *tracker) finish(s *session) {
	s.end()
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.byUID[s.uid], s)
	if len(t.byUID[s.uid]) == 0 {
		delete(t.byUID, s.uid)
	}
}

// endUID ends every session of uid.
func (t *tracker) endUID(uid string) {
	t.mu.Lock()
	var ss []*session
	for s := range t.byUID[uid] {
		ss = append(ss, s)
	}
	t.mu.Unlock()
	for _, s := range ss {
		s.end()
	}
}

// closeAll refuses new sessions and ends every active one.
func (t *tracker) closeAll() {
	t.mu.Lock()
	t.closed = true
	var ss []*session
	for _, m := range t.byUID {
		for s := range m {
			ss = append(ss, s)
		}
	}
	t.mu.Unlock()
	for _, s := range ss {
		s.end()
	}
}
