//go:build cluster && qemu

package e2e

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// rateUserData counts, each second, how often the guest's shell loop runs
// and prints the count on the console: a guest workload whose rate the
// scrapes must not change.
const rateUserData = `#!/bin/sh
( while :; do
  s=$(date +%s); i=0
  while [ "$(date +%s)" = "$s" ]; do i=$((i+1)); done
  echo "KEMU-E2E rate $i" >/dev/console
done ) &
`

var rateRE = regexp.MustCompile(`KEMU-E2E rate (\d+)`)

// BenchmarkScrape measures one scrape of a node agent's /metrics with 1 and
// 10 VMIs on its node: wall time and bytes of a scrape that asks every
// launcher (more than the collector's 5 s cache apart), and the node
// agent's CPU time per scrape (its process's utime+stime). With 1 VMI it
// also compares the guest's loop rate without scrapes and with a scrape
// every second.
//
//	go test -tags 'cluster qemu' -run '^$' -bench Scrape -benchtime 1x ./test/e2e/
func BenchmarkScrape(b *testing.B) {
	ev := need(b)
	dumpOnFailure(b, ev)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	node := ev.c.Nodes[0].Name
	for _, n := range []int{1, 10} {
		b.Run(fmt.Sprintf("%d-vmi", n), func(b *testing.B) {
			var names []string
			for i := range n {
				name := fmt.Sprintf("bench-scrape-%d", i)
				names = append(names, name)
				b.Cleanup(func() { ev.c.Kubectl("-n", ns, "delete", "vmi", name, "--ignore-not-found", "--timeout=3m") }) //nolint:errcheck // best effort
				ev.apply(b, vmiManifest(vmiOptions{name: name, node: node, noNetwork: true, userData: rateUserData}))
			}
			for _, name := range names {
				ev.waitRunning(ctx, b, name, 2*bootTimeout)
			}
			agent, err := ev.nodeAgentPod(ctx, node)
			if err != nil {
				b.Fatal(err)
			}
			pid, err := podProcess(string(agent.UID), "kemu-nodeagent")
			if err != nil {
				b.Fatal(err)
			}
			// Every VMI's series are there before measuring.
			if err := poll(ctx, time.Second, func() error {
				raw, err := ev.nodeAgentScrape(ctx, node)
				if err != nil {
					return err
				}
				if got := strings.Count(string(raw), "kemu_vmi_cpu_usage_seconds_total{"); got < n {
					return fmt.Errorf("%d VMIs in the scrape, want %d", got, n)
				}
				return nil
			}); err != nil {
				b.Fatal(err)
			}
			const scrapes = 6
			var took []time.Duration
			var size int
			cpu0, err := procCPU(pid)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				for range scrapes {
					time.Sleep(5500 * time.Millisecond) // past the collector's 5 s cache: each scrape asks the launchers
					t0 := time.Now()
					raw, err := ev.nodeAgentScrape(ctx, node)
					if err != nil {
						b.Fatal(err)
					}
					took = append(took, time.Since(t0))
					size = len(raw)
				}
			}
			cpu1, err := procCPU(pid)
			if err != nil {
				b.Fatal(err)
			}
			p50, _, pmax := percentiles(took)
			b.ReportMetric(ms(p50), "ms-p50-scrape")
			b.ReportMetric(ms(pmax), "ms-max-scrape")
			b.ReportMetric(float64(size)/1024, "KiB-scrape")
			// The agent's CPU over the loop includes its idle work (informers,
			// heartbeat) during the waits: an upper bound per scrape.
			b.ReportMetric(ms(cpu1-cpu0)/float64(len(took)), "ms-cpu-per-scrape")
			if n == 1 {
				base, scraped := guestRates(ctx, b, ev, names[0], node)
				b.ReportMetric(base, "guest-rate-no-scrape")
				b.ReportMetric(scraped, "guest-rate-scrape-1s")
				b.ReportMetric(scraped/base, "x-guest-rate")
			}
		})
	}
}

// guestRates is the median of the guest's per-second loop counts over 20 s
// without scrapes, then over 20 s with a scrape every second.
func guestRates(ctx context.Context, b *testing.B, ev *env, name, node string) (base, scraped float64) {
	con := ev.startConsole(b, name)
	defer con.stop()
	if err := con.waitFor(ctx, "KEMU-E2E rate", 3*time.Minute); err != nil {
		b.Fatal(err)
	}
	window := func(scrape bool) float64 {
		start := len(con.out.String())
		stop := make(chan struct{})
		var wg sync.WaitGroup
		if scrape {
			wg.Go(func() {
				tick := time.NewTicker(time.Second)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
						_, _ = ev.nodeAgentScrape(ctx, node)
					}
				}
			})
		}
		time.Sleep(20 * time.Second) // the measuring window
		close(stop)
		wg.Wait()
		var rates []float64
		for _, m := range rateRE.FindAllStringSubmatch(con.out.String()[start:], -1) {
			r, _ := strconv.ParseFloat(m[1], 64)
			rates = append(rates, r)
		}
		if len(rates) < 5 {
			b.Fatalf("%d rate lines in 20 s", len(rates))
		}
		slices.Sort(rates)
		return rates[len(rates)/2]
	}
	return window(false), window(true)
}

// procCPU is a process's user+system CPU time.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * (time.Second / 100), nil // USER_HZ
}
