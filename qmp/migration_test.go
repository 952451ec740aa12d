package qmp

import (
	"context"
	"encoding/json"
	"testing"
)

// Each migration and storage-copy command sends QEMU's name and arguments
// as its 7.2 schema spells them and decodes the reply.
func TestMigrationCommands(t *testing.T) {
	yes := true
	bw, dl := int64(64<<20), int64(300)
	for _, tc := range []struct {
		name    string
		call    func(context.Context, *Monitor) (any, error)
		execute string
		args    string // "" = no arguments
		reply   string
		want    string // the decoded reply as JSON, "" = none
	}{
		{name: "capabilities", execute: "migrate-set-capabilities",
			call: func(ctx context.Context, m *Monitor) (any, error) {
				return nil, m.MigrateSetCapabilities(ctx, []MigrationCapability{{CapEvents, true}, {CapPauseBeforeSwitch, true}})
			},
			args: `{"capabilities":[{"capability":"events","state":true},{"capability":"pause-before-switchover","state":true}]}`},
		{name: "parameters", execute: "migrate-set-parameters",
			call: func(ctx context.Context, m *Monitor) (any, error) {
				return nil, m.MigrateSetParameters(ctx, MigrationParameters{MaxBandwidth: &bw, DowntimeLimit: &dl})
			},
			args: `{"max-bandwidth":67108864,"downtime-limit":300}`},
		{name: "migrate", execute: "migrate", args: `{"uri":"unix:/run/x/main.sock"}`,
			call: func(ctx context.Context, m *Monitor) (any, error) {
				return nil, m.Migrate(ctx, "unix:/run/x/main.sock")
			}},
		{name: "incoming", execute: "migrate-incoming", args: `{"uri":"unix:/run/y/in.sock"}`,
			call: func(ctx context.Context, m *Monitor) (any, error) {
				return nil, m.MigrateIncoming(ctx, "unix:/run/y/in.sock")
			}},
		{name: "cancel", execute: "migrate_cancel",
			call: func(ctx context.Context, m *Monitor) (any, error) { return nil, m.MigrateCancel(ctx) }},
		{name: "continue", execute: "migrate-continue", args: `{"state":"pre-switchover"}`,
			call: func(ctx context.Context, m *Monitor) (any, error) {
				return nil, m.MigrateContinue(ctx, MigrationStatusPreSwitchover)
			}},
		{name: "postcopy", execute: "migrate-start-postcopy",
			call: func(ctx context.Context, m *Monitor) (any, error) { return nil, m.MigrateStartPostcopy(ctx) }},
		{name: "query-migrate", execute: "query-migrate",
			call: func(ctx context.Context, m *Monitor) (any, error) { return m.QueryMigrate(ctx) },
			reply: `{"status":"completed","total-time":1234,"downtime":12,"setup-time":3,"expected-downtime":300,` +
				`"ram":{"transferred":1000,"remaining":0,"total":268435456,"dirty-sync-count":4,"dirty-pages-rate":17,"mbps":800.5}}`,
			want: `{"status":"completed","total-time":1234,"expected-downtime":300,"downtime":12,"setup-time":3,` +
				`"ram":{"transferred":1000,"remaining":0,"total":268435456,"duplicate":0,"normal":0,"normal-bytes":0,` +
				`"dirty-pages-rate":17,"mbps":800.5,"dirty-sync-count":4,"postcopy-requests":0,"page-size":0},` +
				`"cpu-throttle-percentage":0,"error-desc":""}`},
		{name: "nbd-server-start", execute: "nbd-server-start",
			args: `{"addr":{"data":{"path":"/run/y/nbd.sock"},"type":"unix"}}`,
			call: func(ctx context.Context, m *Monitor) (any, error) {
				return nil, m.NBDServerStart(ctx, "/run/y/nbd.sock")
			}},
		{name: "block-export-add", execute: "block-export-add",
			args: `{"id":"exp-drive-root","name":"drive-root","node-name":"drive-root","type":"nbd","writable":true}`,
			call: func(ctx context.Context, m *Monitor) (any, error) {
				return nil, m.BlockExportAddNBD(ctx, "exp-drive-root", "drive-root", "drive-root", true)
			}},
		{name: "nbd-server-stop", execute: "nbd-server-stop",
			call: func(ctx context.Context, m *Monitor) (any, error) { return nil, m.NBDServerStop(ctx) }},
		{name: "blockdev-add nbd", execute: "blockdev-add",
			args: `{"driver":"nbd","export":"drive-root","node-name":"mig-root","server":{"type":"unix","path":"/run/x/disk.sock"}}`,
			call: func(ctx context.Context, m *Monitor) (any, error) {
				return nil, m.BlockdevAddNBD(ctx, "mig-root", "/run/x/disk.sock", "drive-root")
			}},
		{name: "blockdev-add nbd fd", execute: "blockdev-add",
			args: `{"driver":"nbd","export":"drive-root","node-name":"mig-root","server":{"type":"fd","str":"mig-nbd0"}}`,
			call: func(ctx context.Context, m *Monitor) (any, error) {
				return nil, m.BlockdevAddNBDFD(ctx, "mig-root", "mig-nbd0", "drive-root")
			}},
		{name: "blockdev-mirror", execute: "blockdev-mirror",
			args: `{"job-id":"mirror-root","device":"drive-root","target":"mig-root","sync":"full","auto-dismiss":true}`,
			call: func(ctx context.Context, m *Monitor) (any, error) {
				return nil, m.BlockdevMirror(ctx, MirrorOptions{JobID: "mirror-root", Device: "drive-root", Target: "mig-root",
					Sync: MirrorSyncFull, AutoDismiss: &yes})
			}},
		{name: "block-job-complete", execute: "block-job-complete", args: `{"device":"mirror-root"}`,
			call: func(ctx context.Context, m *Monitor) (any, error) { return nil, m.BlockJobComplete(ctx, "mirror-root") }},
		{name: "block-job-cancel", execute: "block-job-cancel", args: `{"device":"mirror-root"}`,
			call: func(ctx context.Context, m *Monitor) (any, error) {
				return nil, m.BlockJobCancel(ctx, "mirror-root", false)
			}},
		{name: "block-job-cancel force", execute: "block-job-cancel", args: `{"device":"mirror-root","force":true}`,
			call: func(ctx context.Context, m *Monitor) (any, error) {
				return nil, m.BlockJobCancel(ctx, "mirror-root", true)
			}},
		{name: "query-block-jobs", execute: "query-block-jobs",
			call:  func(ctx context.Context, m *Monitor) (any, error) { return m.QueryBlockJobs(ctx) },
			reply: `[{"type":"mirror","device":"mirror-root","len":100,"offset":100,"busy":false,"paused":false,"speed":0,"ready":true,"status":"ready","io-status":"ok"}]`,
			want:  `[{"type":"mirror","device":"mirror-root","len":100,"offset":100,"busy":false,"paused":false,"speed":0,"ready":true,"status":"ready"}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, f := connected(t)
			var got any
			done := async(func() error {
				var err error
				got, err = tc.call(ctxT(t), m)
				return err
			})
			req := f.recv()
			if req.Execute != tc.execute {
				t.Errorf("sent %q, want %q", req.Execute, tc.execute)
			}
			if args := string(req.Arguments); args != tc.args {
				t.Errorf("arguments %s, want %s", args, tc.args)
			}
			reply := tc.reply
			if reply == "" {
				reply = "{}"
			}
			f.reply(req, reply)
			if err := waitErr(t, done); err != nil {
				t.Fatal(err)
			}
			if tc.want != "" {
				b, _ := json.Marshal(got)
				if string(b) != tc.want {
					t.Errorf("reply decoded as\n%s\nwant\n%s", b, tc.want)
				}
			}
		})
	}
}

// The migration and block job events decode into their typed data.
func TestMigrationEventsDecode(t *testing.T) {
	m, f := connected(t)
	sub := m.Subscribe()
	defer sub.Close()
	f.event(EventMigration, `{"status":"pre-switchover"}`)
	f.event(EventMigrationPass, `{"pass":3}`)
	f.event(EventBlockJobReady, `{"type":"mirror","device":"mirror-root","len":1048576,"offset":1048576,"speed":0}`)
	f.event(EventBlockJobCompleted, `{"type":"mirror","device":"mirror-root","len":10,"offset":5,"speed":0,"error":"Input/output error"}`)
	f.event(EventBlockJobError, `{"device":"mirror-root","operation":"write","action":"report"}`)

	next := func() Event {
		t.Helper()
		e, err := sub.Next(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	var mig MigrationEvent
	if err := next().Decode(&mig); err != nil || mig.Status != MigrationStatusPreSwitchover {
		t.Errorf("MIGRATION %+v %v", mig, err)
	}
	var pass MigrationPassEvent
	if err := next().Decode(&pass); err != nil || pass.Pass != 3 {
		t.Errorf("MIGRATION_PASS %+v %v", pass, err)
	}
	var ready BlockJobEvent
	if err := next().Decode(&ready); err != nil || ready != (BlockJobEvent{Type: "mirror", Device: "mirror-root", Len: 1 << 20, Offset: 1 << 20}) {
		t.Errorf("BLOCK_JOB_READY %+v %v", ready, err)
	}
	var done BlockJobEvent
	if err := next().Decode(&done); err != nil || done.Error != "Input/output error" || done.Offset != 5 {
		t.Errorf("BLOCK_JOB_COMPLETED %+v %v", done, err)
	}
	var jerr BlockJobErrorEvent
	if err := next().Decode(&jerr); err != nil || jerr != (BlockJobErrorEvent{Device: "mirror-root", Operation: "write", Action: "report"}) {
		t.Errorf("BLOCK_JOB_ERROR %+v %v", jerr, err)
	}
	f.send(`{"timestamp": {"seconds": 1, "microseconds": 0}, "event": "STOP"}` + "\r\n")
	if err := next().Decode(&mig); err == nil {
		t.Error("decoding an event without data: no error")
	}
}
