package migrationproxy

import (
	"context"
	"io"
	"net"
	"testing"
	"time"
)

// benchBytes is what each iteration sends, through the proxies and
// directly.
const benchBytes = 256 << 20

// BenchmarkProxyThroughput sends benchBytes through a source listener →
// TLS → server → a unix sink, and the same directly into a unix sink, in
// the same run. Metrics: MiB/s-proxy, MiB/s-direct, x-proxy-over-direct
// (the time ratio).
func BenchmarkProxyThroughput(b *testing.B) {
	ca := newTestCA(b)
	a, t := newTestNode(b, ca, "node-a"), newTestNode(b, ca, "node-b")
	srv := startServer(b, t)
	sink := startUnixTarget(b, b.TempDir(), "sink.sock", sinkHandler)
	if err := srv.Register(testUID, "node-a", map[string]string{ChannelMain: sink.path}); err != nil {
		b.Fatal(err)
	}
	src, err := ListenSource(context.Background(), b.TempDir(), testUID, []string{ChannelMain}, targetOf(srv, t), a.store)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { src.Close() })
	buf := make([]byte, copyBufferSize)
	var proxy, direct time.Duration
	b.SetBytes(benchBytes)
	b.ResetTimer()
	for range b.N {
		proxy += sendTo(b, src.Paths()[ChannelMain], buf)
		direct += sendTo(b, sink.path, buf)
	}
	b.StopTimer()
	mib := float64(benchBytes) / (1 << 20) * float64(b.N)
	b.ReportMetric(mib/proxy.Seconds(), "MiB/s-proxy")
	b.ReportMetric(mib/direct.Seconds(), "MiB/s-direct")
	b.ReportMetric(proxy.Seconds()/direct.Seconds(), "x-proxy-over-direct")
}

// sendTo writes benchBytes to the unix socket at path, half-closes, and
// waits for the sink's close (it read everything); it returns the time.
func sendTo(b *testing.B, path string, buf []byte) time.Duration {
	start := time.Now()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for sent := 0; sent < benchBytes; sent += len(buf) {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := c.CloseWrite(); err != nil {
		b.Fatal(err)
	}
	var got [8]byte
	n, err := io.ReadFull(c, got[:])
	if err != nil || n != 8 || string(got[:]) != "received" {
		b.Fatalf("sink answered %q, %v", got[:n], err)
	}
	return time.Since(start)
}

// sinkHandler reads everything into one buffer, checks the count and
// answers "received".
func sinkHandler(c *net.UnixConn) {
	buf := make([]byte, copyBufferSize)
	var n int64
	for {
		k, err := c.Read(buf)
		n += int64(k)
		if err != nil {
			break
		}
	}
	if n == benchBytes {
		c.Write([]byte("received"))
	}
}
