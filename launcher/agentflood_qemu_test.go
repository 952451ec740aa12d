//go:build qemu

package launcher

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kemu-dev/kemu/qmp"
	"github.com/kemu-dev/kemu/test/testguest"
)

// floodBytes is what the guest writes on its agent channel: 60 MiB without
// a newline.
const floodBytes = 60 << 20

// floodVMI's user-data script waits for /run/kemu/flood-go (created through
// the agent, so the agent is known to work first), stops qemu-ga (a
// virtio-serial port has one opener), writes floodBytes of 'x' without a
// newline to the agent's port, and starts qemu-ga again; markers on the
// console say when.
const floodVMI = `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: flood}
spec:
  domain:
    memory: {guest: 256Mi}
    devices:
      autoattachPodInterface: false
      disks:
      - {name: root, disk: {bus: virtio}}
      - {name: ci, disk: {bus: virtio}}
  volumes:
  - {name: root, containerDisk: {image: "oci:_out/testguest/oci/containerdisk"}}
  - name: ci
    cloudInitNoCloud:
      userData: |
        #!/bin/sh
        m() { echo "KEMU-GUEST flood $*" >/dev/console; }
        until [ -e /run/kemu/flood-go ]; do usleep 100000; done
        sleep 1 # let the agent finish the guest-exec that made the file
        port=
        for p in /sys/class/virtio-ports/*; do
          [ "$(cat "$p/name")" = org.qemu.guest_agent.0 ] && port=/dev/${p##*/}
        done
        pid=
        for d in /proc/[0-9]*; do
          [ "$(cat "$d/comm" 2>/dev/null)" = qemu-ga ] && pid=${d#/proc/}
        done
        [ -n "$pid" ] || { m status=failed reason=no-qemu-ga; exit 1; }
        kill "$pid"
        while kill -0 "$pid" 2>/dev/null; do usleep 50000; done
        m status=started port=$port
        head -c FLOODBYTES /dev/zero | tr '\000' x >"$port"
        m status=done rc=$?
        qemu-ga -m virtio-serial -p "$port" -t /var/lib/qemu-ga >>/run/kemu/qemu-ga.log 2>&1 &
        m status=agent-restarted
`

// memSample is the test process's (the launcher's) memory at one moment.
type memSample struct {
	heapInuse, rss uint64
}

func sampleMem() memSample {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memSample{heapInuse: ms.HeapInuse, rss: vmRSS()}
}

// vmRSS is VmRSS from /proc/self/status, in bytes.
func vmRSS() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// TestAgentFlood: a guest writes 60 MiB without a newline on its agent
// channel. The launcher's memory stays flat (each line over 1 MiB is
// dropped with its connection and counted), the VM keeps running, and the
// agent answers again once the guest restarted qemu-ga.
func TestAgentFlood(t *testing.T) {
	vmi := parseVMI(t, strings.Replace(floodVMI, "FLOODBYTES", strconv.Itoa(floodBytes), 1))
	v := start(t, newConfig(t, vmi))
	v.wait(bootTimeout, testguest.IsKind(testguest.KindUserDataScript, "status", "started"))

	// The agent works before the flood, and it starts it.
	ctx := ctxFor(t, 4*time.Minute)
	pollPing(t, ctx, v.l, bootTimeout, "before the flood")
	a, err := v.l.Agent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := a.Run(ctx, "/bin/touch", []string{"/run/kemu/flood-go"}, nil); err != nil || st.ExitCode != 0 {
		t.Fatalf("touch /run/kemu/flood-go through the agent: %+v %v", st, err)
	}

	runtime.GC()
	debug.FreeOSMemory()
	base := sampleMem()
	dropped0 := qmp.AgentLinesDropped()
	var (
		mu   sync.Mutex
		peak = base
		n    int
	)
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			s := sampleMem()
			mu.Lock()
			peak.heapInuse, peak.rss = max(peak.heapInuse, s.heapInuse), max(peak.rss, s.rss)
			n++
			mu.Unlock()
		}
	}()

	started := v.wait(stepTimeout, testguest.IsKind("flood", "status", "started"))
	t0 := time.Now()
	// The guest's writes block while no client is connected to the agent
	// socket: keep reconnecting (as the node agent's GuestPing probes do)
	// until the guest has written everything.
	pings, pingErrs := 0, 0
	var lastErr error
	doneCtx, cancelDone := context.WithTimeout(ctx, 3*time.Minute)
	defer cancelDone()
	doneCh := make(chan testguest.Marker, 1)
	go func() {
		m, err := v.w.WaitAfter(doneCtx, started.Seq, testguest.IsKind("flood", "status", "done"))
		if err == nil {
			doneCh <- m
		}
		close(doneCh)
	}()
	var done testguest.Marker
flood:
	for {
		select {
		case m, ok := <-doneCh:
			if !ok {
				t.Fatalf("the guest did not finish writing %d bytes in 3 minutes (%d pings, %d failed, last: %v)",
					floodBytes, pings, pingErrs, lastErr)
			}
			done = m
			break flood
		default:
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := v.l.GuestPing(pctx)
		cancel()
		pings++
		if err != nil {
			pingErrs++
			lastErr = err
		}
		if st := v.l.Domain().State; st != StateRunning {
			t.Fatalf("the domain is %s during the flood", st)
		}
	}
	took := time.Since(t0)
	close(stop)
	<-sampled
	if rc := done.Field("rc"); rc != "0" {
		t.Errorf("the guest's flood ended with rc=%s", rc)
	}
	dropped := qmp.AgentLinesDropped() - dropped0

	// qemu-ga is back: the agent answers again and the VM still runs.
	v.waitAfter(stepTimeout, done.Seq, testguest.IsKind("flood", "status", "agent-restarted"))
	pollPing(t, ctx, v.l, stepTimeout, "after the flood")
	if d := v.l.Domain(); d.State != StateRunning || !d.AgentConnected {
		t.Errorf("after the flood: %s, agent connected %v", d, d.AgentConnected)
	}
	if osi, err := func() (qmp.OSInfo, error) {
		a, err := v.l.Agent(ctx)
		if err != nil {
			return qmp.OSInfo{}, err
		}
		return a.OSInfo(ctx)
	}(); err != nil || osi.ID != "kemu-testguest" {
		t.Errorf("guest-get-osinfo after the flood: %+v %v", osi, err)
	}

	mu.Lock()
	defer mu.Unlock()
	heapGrowth, rssGrowth := int64(peak.heapInuse)-int64(base.heapInuse), int64(peak.rss)-int64(base.rss)
	t.Logf("flood of %d MiB in %s: %d pings (%d failed), %d oversize lines dropped; %d samples: HeapInuse %.1f → peak %.1f MiB (+%.1f), VmRSS %.1f → peak %.1f MiB (+%.1f)",
		floodBytes>>20, took.Round(time.Millisecond), pings, pingErrs, dropped, n,
		mib(base.heapInuse), mib(peak.heapInuse), float64(heapGrowth)/(1<<20),
		mib(base.rss), mib(peak.rss), float64(rssGrowth)/(1<<20))
	const limit = 32 << 20
	if heapGrowth >= limit {
		t.Errorf("HeapInuse grew by %.1f MiB during the flood, want < 32 MiB", float64(heapGrowth)/(1<<20))
	}
	if rssGrowth >= limit {
		t.Errorf("VmRSS grew by %.1f MiB during the flood, want < 32 MiB", float64(rssGrowth)/(1<<20))
	}
	// Every connection made during the flood ends in an oversize line; at
	// most the part of the flood written before the first one is lost.
	if want := int64(floodBytes/qmp.MaxAgentLineSize) / 2; int64(dropped) < want {
		t.Errorf("%d oversize lines counted, want at least %d for %d MiB", dropped, want, floodBytes>>20)
	}
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// pollPing pings the guest agent until it answers.
func pollPing(t *testing.T, ctx context.Context, l *Launcher, within time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := l.GuestPing(pctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the guest agent does not answer %s: %v", what, err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the guest agent does not answer %s: %v", what, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}
