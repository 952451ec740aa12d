package testguest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
)

// ErrClosed is returned (wrapped) by Wait when the console ended before a
// matching marker arrived.
var ErrClosed = errors.New("serial console closed")

// Watcher reads a serial console, keeps every line and parsed marker, and
// lets tests wait for markers with a context deadline.
type Watcher struct {
	mu      sync.Mutex
	lines   []string
	markers []Marker
	changed chan struct{} // closed and replaced whenever something arrives
	done    chan struct{}
	err     error // read error other than io.EOF, set before done is closed
	tee     io.Writer
}

// WatcherOption configures a Watcher.
type WatcherOption func(*Watcher)

// WithTee copies every console line (with "\n") to w, e.g. a log file or a
// t.Log adapter. Writes happen on the reading goroutine.
func WithTee(w io.Writer) WatcherOption { return func(wa *Watcher) { wa.tee = w } }

// NewWatcher starts reading r until EOF or error. Closing r stops it.
func NewWatcher(r io.Reader, opts ...WatcherOption) *Watcher {
	w := &Watcher{changed: make(chan struct{}), done: make(chan struct{})}
	for _, o := range opts {
		o(w)
	}
	go w.read(r)
	return w
}

// NewChanWatcher watches a console delivered as chunks on a channel (the
// launcher's Console), until the channel is closed.
func NewChanWatcher(out <-chan []byte, opts ...WatcherOption) *Watcher {
	pr, pw := io.Pipe()
	go func() {
		for b := range out {
			if _, err := pw.Write(b); err != nil {
				return
			}
		}
		pw.Close()
	}()
	return NewWatcher(pr, opts...)
}

func (w *Watcher) read(r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	var err error
	for {
		var line string
		line, err = br.ReadString('\n')
		if line != "" {
			w.add(line)
		}
		if err != nil {
			break
		}
	}
	w.mu.Lock()
	if !errors.Is(err, io.EOF) {
		w.err = err
	}
	close(w.done)
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
}

func (w *Watcher) add(line string) {
	line = strings.TrimRight(line, "\r\n")
	// A console line may carry several \r-separated segments (firmware
	// screen updates); markers are always whole segments.
	if w.tee != nil {
		_, _ = io.WriteString(w.tee, line+"\n")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lines = append(w.lines, line)
	for _, seg := range strings.Split(line, "\r") {
		if m, ok := ParseMarker(seg); ok {
			m.Seq = len(w.markers) + 1
			w.markers = append(w.markers, m)
		}
	}
	close(w.changed)
	w.changed = make(chan struct{})
}

// Wait returns the first marker seen since the start that matches pred,
// waiting for it until ctx ends or the console closes.
func (w *Watcher) Wait(ctx context.Context, pred Predicate) (Marker, error) {
	return w.WaitAfter(ctx, 0, pred)
}

// WaitAfter is Wait restricted to markers with Seq > seq, e.g. "a tick after
// this one": WaitAfter(ctx, m.Seq, IsKind("tick")).
func (w *Watcher) WaitAfter(ctx context.Context, seq int, pred Predicate) (Marker, error) {
	next := seq // markers[next:] not yet inspected
	for {
		w.mu.Lock()
		for ; next < len(w.markers); next++ {
			if m := w.markers[next]; pred(m) {
				w.mu.Unlock()
				return m, nil
			}
		}
		changed := w.changed
		closed := w.isDone()
		w.mu.Unlock()
		if closed {
			return Marker{}, fmt.Errorf("%w before the marker arrived (err: %v); console tail:\n%s", ErrClosed, w.Err(), w.Tail(20))
		}
		select {
		case <-ctx.Done():
			return Marker{}, fmt.Errorf("waiting for marker: %w; console tail:\n%s", ctx.Err(), w.Tail(20))
		case <-changed:
		}
	}
}

// WaitKind waits for the first marker of a kind (see IsKind for fields).
func (w *Watcher) WaitKind(ctx context.Context, kind string, kv ...string) (Marker, error) {
	return w.Wait(ctx, IsKind(kind, kv...))
}

func (w *Watcher) isDone() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// Markers returns a copy of the markers seen so far.
func (w *Watcher) Markers() []Marker {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Marker(nil), w.markers...)
}

// Find returns the markers seen so far that match pred.
func (w *Watcher) Find(pred Predicate) []Marker {
	var out []Marker
	for _, m := range w.Markers() {
		if pred(m) {
			out = append(out, m)
		}
	}
	return out
}

// Log returns every console line read so far.
func (w *Watcher) Log() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.lines) == 0 {
		return ""
	}
	return strings.Join(w.lines, "\n") + "\n"
}

// Tail returns the last n console lines.
func (w *Watcher) Tail(n int) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	l := w.lines
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// Done is closed when the console reached EOF or failed.
func (w *Watcher) Done() <-chan struct{} { return w.done }

// Err is the read error that ended the console, nil for EOF or while running.
func (w *Watcher) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}
