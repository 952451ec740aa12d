//go:build qemu

// Benchmarks against a real QEMU (TCG, no guest):
// `go test -tags qemu -run '^$' -bench . ./qmp/`.
package qmp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/kemu-dev/kemu/qmp"
)

// BenchmarkQueryStatus is one query-status round trip through
// Monitor.QueryStatus (encode, write, reader goroutine, id match, decode).
func BenchmarkQueryStatus(b *testing.B) {
	p := startQEMU(b)
	m := p.monitor(p.qmpPath())
	ctx := context.Background()
	if _, err := m.QueryStatus(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		st, err := m.QueryStatus(ctx)
		if err != nil || st.Status != "prelaunch" {
			b.Fatalf("query-status = %+v, %v", st, err)
		}
	}
}

// BenchmarkQueryStatusParallel is the same from several goroutines at once
// (replies matched by id, one reader).
func BenchmarkQueryStatusParallel(b *testing.B) {
	p := startQEMU(b)
	m := p.monitor(p.qmpPath())
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := m.QueryStatus(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkRawSocketQueryStatus is the baseline: the bytes Monitor sends,
// written on a plain connection, and one reply line read back.
func BenchmarkRawSocketQueryStatus(b *testing.B) {
	p := startQEMU(b)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c, err := p.dialUnix(ctx, p.qmpPath())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReaderSize(c, 64<<10)
	readLine := func() []byte {
		line, err := r.ReadSlice('\n')
		if err != nil {
			b.Fatal(err)
		}
		return line
	}
	readLine() // greeting
	if _, err := c.Write([]byte(`{"execute":"qmp_capabilities"}` + "\n")); err != nil {
		b.Fatal(err)
	}
	readLine()
	req := []byte(`{"execute":"query-status","id":"kemu-1"}` + "\n")
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		line := readLine()
		if line[0] != '{' || line[2] != 'r' { // {"return": ...
			b.Fatalf("reply %q", line)
		}
	}
}

// BenchmarkRawSocketQueryStatusDecoded is the baseline plus the JSON work
// any client must do: encode the request, decode the reply.
func BenchmarkRawSocketQueryStatusDecoded(b *testing.B) {
	p := startQEMU(b)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c, err := p.dialUnix(ctx, p.qmpPath())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReaderSize(c, 64<<10)
	readLine := func() []byte {
		line, err := r.ReadSlice('\n')
		if err != nil {
			b.Fatal(err)
		}
		return line
	}
	readLine()
	if _, err := c.Write([]byte(`{"execute":"qmp_capabilities"}` + "\n")); err != nil {
		b.Fatal(err)
	}
	readLine()
	type request struct {
		Execute string `json:"execute"`
		ID      string `json:"id"`
	}
	var reply struct {
		Return qmp.StatusInfo `json:"return"`
		ID     string         `json:"id"`
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		i++
		req, _ := json.Marshal(request{Execute: "query-status", ID: fmt.Sprint("kemu-", i)})
		if _, err := c.Write(append(req, '\n')); err != nil {
			b.Fatal(err)
		}
		if err := json.Unmarshal(readLine(), &reply); err != nil || reply.Return.Status != "prelaunch" {
			b.Fatalf("reply %+v, %v", reply, err)
		}
	}
}

// BenchmarkEventFanout10 measures event delivery to 10 subscriptions: each
// iteration runs stop and cont (events STOP and RESUME) and waits until all
// 10 subscriptions, each read by its own goroutine, have both. ns/event is
// the time per event including the command that causes it; ns/emit-to-all is
// the time from QEMU's event timestamp until the last subscription had it.
func BenchmarkEventFanout10(b *testing.B) { benchmarkEventFanout(b, 10) }

// BenchmarkEventFanout1 is the same with one subscription, for comparison.
func BenchmarkEventFanout1(b *testing.B) { benchmarkEventFanout(b, 1) }

func benchmarkEventFanout(b *testing.B, n int) {
	p := startQEMU(b)
	m := p.monitor(p.qmpPath())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := m.Cont(ctx); err != nil {
		b.Fatal(err)
	}

	got := make(chan time.Duration, 2*n)
	for range n {
		sub := m.Subscribe(qmp.WithFilter(qmp.AnyOf("STOP", "RESUME")), qmp.WithBuffer(64))
		defer sub.Close()
		go func() {
			for {
				e, err := sub.Next(ctx)
				if err != nil {
					return
				}
				got <- time.Since(e.Timestamp)
			}
		}()
	}
	var emitToAll time.Duration
	wait := func() {
		var last time.Duration
		for range n {
			select {
			case d := <-got:
				last = max(last, d)
			case <-time.After(stepTimeout):
				b.Fatal("an event did not reach every subscription")
			}
		}
		emitToAll += last
	}
	b.ResetTimer()
	for b.Loop() {
		if err := m.Stop(ctx); err != nil {
			b.Fatal(err)
		}
		wait()
		if err := m.Cont(ctx); err != nil {
			b.Fatal(err)
		}
		wait()
	}
	b.StopTimer()
	events := float64(2 * b.N)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/events, "ns/event")
	b.ReportMetric(float64(emitToAll.Nanoseconds())/events, "ns/emit-to-all")
}
