//go:build qemu

package main

import (
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkCIStep measures a CI step as a pipeline runs it, the whole
// `kemuctl run` from exec to exit (the test guest, TCG here):
//   - baseline: boot, wait for the guest agent, shut down (--then shutdown);
//   - ci-step: the same with issue 19's step — exec `uname -a`, exec
//     `false`, a JUnit file and the serial log; it exits 1 by design.
//
// The ratio is what the exec steps, the JUnit file and the serial log cost
// beyond booting and stopping the guest.
//
//	go test -tags qemu -run '^$' -bench CIStep -benchtime 1x ./cmd/kemuctl/
func BenchmarkCIStep(b *testing.B) {
	var base, step time.Duration
	for _, c := range []struct {
		name     string
		args     func(dir string) []string
		wantCode int
		took     *time.Duration
	}{
		{"baseline", func(string) []string { return []string{"--wait-agent", "--then", "shutdown"} }, 0, &base},
		{"ci-step", func(dir string) []string {
			return []string{"--wait-agent", "--then", "exec=uname -a", "--then", "exec=false",
				"--junit", filepath.Join(dir, "out.xml"), "--serial-log", filepath.Join(dir, "boot.log")}
		}, 1, &step},
	} {
		b.Run(c.name, func(b *testing.B) {
			var total time.Duration
			for b.Loop() {
				dir := b.TempDir()
				code, out, _, took := kemuctlRunToEnd(b, 6*time.Minute, c.args(dir)...)
				total += took
				if code != c.wantCode {
					b.Fatalf("exit %d, want %d:\n%s", code, c.wantCode, out)
				}
			}
			*c.took = total / time.Duration(b.N)
			b.ReportMetric(c.took.Seconds(), "s-wall")
		})
	}
	if base > 0 && step > 0 {
		b.Logf("ci-step / baseline: %.2f", step.Seconds()/base.Seconds())
	}
}
