package shell

import (
	"bytes"
	"strings"
	"testing"

	"github.com/kemu-dev/kemu/launcher/rpc"
)

func TestMigrationSummary(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    *rpc.MigrationState
		want []string
	}{
		{"source moving RAM", &rpc.MigrationState{Role: rpc.MigrationRole_Source, Status: "active", Mode: rpc.MigrationMode_PreCopy,
			BytesTotal: 256 << 20, BytesTransferred: 100 << 20, BytesRemaining: 150 << 20, Passes: 2,
			DiskBytesTotal: 64 << 20, DiskBytesCopied: 64 << 20},
			[]string{"source; active", "RAM 100.0 MiB sent of 256.0 MiB, 150.0 MiB left, 2 passes", "disks 64.0 MiB of 64.0 MiB"}},
		{"completed with its times", &rpc.MigrationState{Role: rpc.MigrationRole_Source, Status: "completed",
			BytesTotal: 1 << 30, BytesTransferred: 1 << 30, TotalMs: 1500, SetupMs: 4, DowntimeMs: 30},
			[]string{"completed", "total 1.5s, setup 4ms, downtime 30ms"}},
		{"post-copy", &rpc.MigrationState{Role: rpc.MigrationRole_Source, Status: "postcopy-active", Mode: rpc.MigrationMode_PostCopy},
			[]string{"postcopy-active; post-copy"}},
		{"a failed target says why", &rpc.MigrationState{Role: rpc.MigrationRole_Target, Status: "failed", Message: "Broken pipe"},
			[]string{"target; failed", "Broken pipe"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := migrationSummary(tc.m)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("migrationSummary = %q, want %q in it", got, w)
				}
			}
		})
	}
	// status and the event stream show it.
	d := &rpc.Domain{State: rpc.DomainState_Paused, Migration: &rpc.MigrationState{Role: rpc.MigrationRole_Source, Status: "pre-switchover"}}
	var b bytes.Buffer
	printDomain(&b, d)
	printEvent(&b, &rpc.WatchEvent{Event: &rpc.WatchEvent_Domain{Domain: d}})
	if n := strings.Count(b.String(), "source; pre-switchover"); n != 2 {
		t.Errorf("status and events show the migration %d times, want 2:\n%s", n, b.String())
	}
}
