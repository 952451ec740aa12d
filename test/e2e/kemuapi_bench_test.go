//go:build cluster && qemu

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/kemu-dev/kemu/api/subresources"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/ctl/apiclient"
)

// BenchmarkKemuAPI measures what kemu-api adds:
//
//   - webhook: 100 server-side dry-run creates of the test guest's VMI with
//     kemu-api's webhooks, then 100 with the webhook configurations
//     removed (restored after), p50 and p95 of each; the difference is the
//     webhooks' cost (mutate + validate, two calls through the Service);
//
//   - console: 50 keystrokes to a shell on the guest's serial console, each
//     timed until the guest's tty echoes it: client → kube-apiserver →
//     kemu-api → the node agent (mutual TLS) → the launcher → QEMU and back.
//
//     go test -tags 'cluster qemu' -run '^$' -bench KemuAPI -benchtime 1x ./test/e2e/
func BenchmarkKemuAPI(b *testing.B) {
	ev := need(b)
	dumpOnFailure(b, ev)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	b.Run("webhook", func(b *testing.B) {
		vmi := &v1.VirtualMachineInstance{}
		if err := yaml.UnmarshalStrict([]byte(vmiManifest(vmiOptions{name: "bench-webhook"})), vmi); err != nil {
			b.Fatal(err)
		}
		creates := func() []time.Duration {
			var d []time.Duration
			for range 100 {
				t0 := time.Now()
				if _, err := ev.kemu.KemuV1alpha1().VirtualMachineInstances(ns).Create(ctx, vmi.DeepCopy(),
					metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
					b.Fatal(err)
				}
				d = append(d, time.Since(t0))
			}
			return d
		}
		var with, without []time.Duration
		for b.Loop() {
			with = creates()
			ev.kubectl(b, "delete", "mutatingwebhookconfiguration,validatingwebhookconfiguration", "kemu-api")
			without = creates()
			b.StopTimer()
			ev.kubectl(b, "apply", "-k", ev.overlay)
			if err := ev.waitKemuAPI(ctx); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		w50, w95, _ := percentiles(with)
		o50, o95, _ := percentiles(without)
		b.ReportMetric(ms(w50), "ms-p50-with-webhooks")
		b.ReportMetric(ms(w95), "ms-p95-with-webhooks")
		b.ReportMetric(ms(o50), "ms-p50-without")
		b.ReportMetric(ms(o95), "ms-p95-without")
		b.ReportMetric(ms(w50-o50), "ms-p50-added")
	})

	b.Run("console", func(b *testing.B) {
		const name = "bench-console"
		b.Cleanup(func() { ev.c.Kubectl("-n", ns, "delete", "vmi", name, "--ignore-not-found", "--timeout=3m") }) //nolint:errcheck // best effort
		ev.apply(b, vmiManifest(vmiOptions{name: name, userData: consoleShellUserData}))
		ev.waitRunning(ctx, b, name, bootTimeout)
		cl, err := apiclient.New(ev.c.RESTConfig())
		if err != nil {
			b.Fatal(err)
		}
		conn, err := cl.Stream(ctx, subresources.Console, ns, name)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		out := make(chan []byte, 64)
		go func() {
			for {
				buf := make([]byte, 4096)
				n, err := conn.Read(buf)
				if n > 0 {
					out <- buf[:n]
				}
				if err != nil {
					close(out)
					return
				}
			}
		}()
		var seen bytes.Buffer
		waitFor := func(s string, timeout time.Duration) error {
			deadline := time.After(timeout)
			for !strings.Contains(seen.String(), s) {
				select {
				case p, ok := <-out:
					if !ok {
						return fmt.Errorf("the console ended before %q", s)
					}
					seen.Write(p)
				case <-deadline:
					return fmt.Errorf("no %q on the console within %s: %q", s, timeout, tail(seen.String(), 300))
				}
			}
			return nil
		}
		// The shell's marker went by at boot; type until a command runs.
		ready := false
		for deadline := time.Now().Add(3 * time.Minute); !ready && time.Now().Before(deadline); {
			if _, err := conn.Write([]byte("echo kemu-$((6*7))-ready\n")); err != nil {
				b.Fatal(err)
			}
			ready = waitFor("kemu-42-ready", 5*time.Second) == nil
		}
		if !ready {
			b.Fatalf("no shell on the console: %q", tail(seen.String(), 300))
		}
		var rtt []time.Duration
		for b.Loop() {
			rtt = rtt[:0]
			for i := range 50 {
				key := string(rune('a' + i%26))
				seen.Reset()
				t0 := time.Now()
				if _, err := conn.Write([]byte(key)); err != nil {
					b.Fatal(err)
				}
				if err := waitFor(key, 30*time.Second); err != nil {
					b.Fatal(err)
				}
				rtt = append(rtt, time.Since(t0))
			}
			if _, err := conn.Write([]byte("\x15")); err != nil { // Ctrl-U: drop the typed line
				b.Fatal(err)
			}
		}
		p50, p95, _ := percentiles(rtt)
		b.ReportMetric(ms(p50), "ms-p50-keystroke-echo")
		b.ReportMetric(ms(p95), "ms-p95-keystroke-echo")
	})
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
