package downwardmetrics

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"time"
)

// PortName is the virtio-serial port the guest's vm-dump-metrics opens
// (KubeVirt's and vhostmd's name).
const PortName = "org.github.vhostmd.1"

// Serial protocol (vm-dump-metrics over virtio-serial, KubeVirt's server):
// the guest writes "GET /metrics/XML" and a blank line; the host answers
// the metrics XML and "\n\n", or InvalidRequest.
const (
	RequestPath    = "/metrics/XML"
	InvalidRequest = "INVALID REQUEST\n\n"
	// NoMetrics is the answer when nothing could be collected (KubeVirt's).
	NoMetrics = "<metrics><!-- host metrics not available --><!-- VM metrics not available --></metrics>"
)

// MaxRequestLine bounds a request line: a longer one is invalid, and what
// the guest sent with it is dropped.
const MaxRequestLine = 4096

// RequestInterval is the least time between two answers: KubeVirt serves
// one request a second.
const RequestInterval = time.Second

// Serve answers the guest's requests on conn, the host end of the
// PortName port, one at a time and at most one per interval, until ctx is
// done or conn is closed (by QEMU: nil). report collects the figures; a
// partial set (report's error beside metrics) is answered as it is, none
// as NoMetrics. onError, when set, hears of bad requests and collection
// errors.
func Serve(ctx context.Context, conn net.Conn, interval time.Duration, report func() (*Metrics, error), onError func(error)) error {
	if onError == nil {
		onError = func(error) {}
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	r := bufio.NewReaderSize(conn, MaxRequestLine)
	var last time.Time
	for {
		if wait := time.Until(last.Add(interval)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
		}
		err := readRequest(r)
		last = time.Now()
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed):
			return nil
		case errors.Is(err, errBadRequest):
			onError(err)
			r.Reset(conn) // drop what came with it, as KubeVirt does
			if _, err := conn.Write([]byte(InvalidRequest)); err != nil {
				return fmt.Errorf("downwardmetrics: answer: %w", err)
			}
			continue
		case err != nil:
			return fmt.Errorf("downwardmetrics: read request: %w", err)
		}
		if _, err := conn.Write(answer(report, onError)); err != nil {
			return fmt.Errorf("downwardmetrics: answer: %w", err)
		}
	}
}

func answer(report func() (*Metrics, error), onError func(error)) []byte {
	m, err := report()
	if err != nil {
		onError(err)
	}
	body := []byte(NoMetrics + "\n")
	if m != nil {
		if b, err := Encode(m); err == nil {
			body = b
		} else {
			onError(err)
		}
	}
	// Encode ends the document with a newline; vm-dump-metrics waits for
	// a blank line.
	return append(bytes.TrimRight(body, "\n"), '\n', '\n')
}

var errBadRequest = errors.New("bad request")

// readRequest reads "GET <RequestPath>" and a blank line ("\r\n" or "\n"
// line ends).
func readRequest(r *bufio.Reader) error {
	line, err := readLine(r)
	if err != nil {
		return err
	}
	line = bytes.Clone(line) // ReadSlice's buffer is reused by the next read
	blank, err := readLine(r)
	if err != nil {
		return err
	}
	if len(blank) != 0 {
		return fmt.Errorf("%w: %.64q is not followed by a blank line", errBadRequest, line)
	}
	method, uri, ok := bytes.Cut(line, []byte(" "))
	if !ok || string(method) != "GET" {
		return fmt.Errorf("%w: %.64q", errBadRequest, line)
	}
	u, err := url.ParseRequestURI(string(uri))
	if err != nil || u.Path != RequestPath {
		return fmt.Errorf("%w: %.64q: only GET %s", errBadRequest, line, RequestPath)
	}
	return nil
}

func readLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		return nil, fmt.Errorf("%w: a line longer than %d bytes", errBadRequest, MaxRequestLine)
	case err != nil:
		return nil, err
	}
	return bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r")), nil
}
