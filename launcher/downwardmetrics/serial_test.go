package downwardmetrics

import (
	"bufio"
	"context"
	"encoding/xml"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// guest is the guest's end of the port: it writes requests and reads
// answers up to the blank line, as vm-dump-metrics does.
type guest struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

func (g guest) ask(req string) string {
	g.t.Helper()
	if _, err := g.conn.Write([]byte(req)); err != nil {
		g.t.Fatal(err)
	}
	return g.answer()
}

func (g guest) answer() string {
	g.t.Helper()
	var b strings.Builder
	for !strings.HasSuffix(b.String(), "\n\n") {
		line, err := g.r.ReadString('\n')
		if err != nil {
			g.t.Fatalf("after %q: %v", b.String(), err)
		}
		b.WriteString(line)
	}
	return b.String()
}

// serve runs Serve on one end of a pipe and returns the guest's end, the
// errors Serve reported and Serve's result.
func serve(t *testing.T, interval time.Duration, report func() (*Metrics, error)) (guest, context.CancelFunc, func() []error, <-chan error) {
	host, g := net.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var mu sync.Mutex
	var errs []error
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, host, interval, report, func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() })
	}()
	t.Cleanup(func() { g.Close() })
	return guest{t: t, conn: g, r: bufio.NewReader(g)}, cancel, func() []error { mu.Lock(); defer mu.Unlock(); return errs }, done
}

// TestServeRequests: GET /metrics/XML and a blank line (LF or CRLF) gets
// the metrics and a blank line; anything else INVALID REQUEST, after which
// the next request is served.
func TestServeRequests(t *testing.T) {
	g, _, errs, _ := serve(t, 0, func() (*Metrics, error) { return sample(), nil })
	for _, req := range []string{"GET /metrics/XML\n\n", "GET /metrics/XML\r\n\r\n", "GET /metrics/XML?x=1\n\n"} {
		a := g.ask(req)
		m, err := parseAnswer(a)
		if err != nil || len(m.Metrics) != len(sample().Metrics) || m.Metrics[0].Value != "node-1" {
			t.Errorf("%q: %q, %v", req, a, err)
		}
	}
	for _, req := range []string{"POST /metrics/XML\n\n", "GET /metrics/JSON\n\n", "GET\n\n", "GET /metrics/XML\nx\n"} {
		if a := g.ask(req); a != InvalidRequest {
			t.Errorf("%q: %q, want %q", req, a, InvalidRequest)
		}
	}
	if a := g.ask("GET /metrics/XML\n\n"); !strings.HasPrefix(a, "<metrics>") {
		t.Errorf("after bad requests: %q", a)
	}
	if n := len(errs()); n != 4 {
		t.Errorf("%d bad requests reported, want 4: %v", n, errs())
	}
}

func parseAnswer(a string) (*Metrics, error) {
	if !strings.HasSuffix(a, "</metrics>\n\n") {
		return nil, errors.New("no blank line after the document")
	}
	var m Metrics
	if err := xml.Unmarshal([]byte(a), &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// TestServeBounded: a request line longer than MaxRequestLine is invalid,
// not buffered.
func TestServeBounded(t *testing.T) {
	g, _, _, _ := serve(t, 0, func() (*Metrics, error) { return sample(), nil })
	go func() { _, _ = g.conn.Write([]byte(strings.Repeat("a", 3*MaxRequestLine) + "\n\n")) }()
	if a := g.answer(); a != InvalidRequest {
		t.Errorf("long line: %q", a)
	}
}

// TestServeRate: one answer per interval at most.
func TestServeRate(t *testing.T) {
	const interval = 300 * time.Millisecond
	g, _, _, _ := serve(t, interval, func() (*Metrics, error) { return sample(), nil })
	g.ask("GET /metrics/XML\n\n")
	start := time.Now()
	g.ask("GET /metrics/XML\n\n")
	if d := time.Since(start); d < interval-20*time.Millisecond {
		t.Errorf("second answer after %v, want at least %v", d, interval)
	}
}

// TestServeNoMetrics: nothing collected is KubeVirt's empty document, and
// the error is reported; partial figures are answered as they are.
func TestServeNoMetrics(t *testing.T) {
	fail := errors.New("no stats")
	g, _, errs, _ := serve(t, 0, func() (*Metrics, error) { return nil, fail })
	if a := g.ask("GET /metrics/XML\n\n"); a != NoMetrics+"\n\n" {
		t.Errorf("answer %q", a)
	}
	if e := errs(); len(e) != 1 || !errors.Is(e[0], fail) {
		t.Errorf("errors %v", e)
	}
	g2, _, _, _ := serve(t, 0, func() (*Metrics, error) { return sample(), fail })
	if a := g2.ask("GET /metrics/XML\n\n"); !strings.Contains(a, "node-1") {
		t.Errorf("partial: %q", a)
	}
}

// TestServeEnds: QEMU closing the socket ends Serve without an error, and
// so does the context.
func TestServeEnds(t *testing.T) {
	g, _, _, done := serve(t, 0, func() (*Metrics, error) { return sample(), nil })
	g.conn.Close()
	if err := <-done; err != nil {
		t.Errorf("peer closed: %v", err)
	}
	_, cancel, _, done := serve(t, time.Hour, func() (*Metrics, error) { return sample(), nil })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("cancelled: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not end with its context")
	}
}
