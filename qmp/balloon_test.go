package qmp

import (
	"encoding/json"
	"testing"
)

// The balloon's QOM commands: qom-set of the polling interval, and qom-get
// of guest-stats decoded (a figure the driver never sent stays -1).
func TestBalloonQOM(t *testing.T) {
	m, f := connected(t)
	done := async(func() error { return m.QOMSet(ctxT(t), "/machine/peripheral/balloon0", BalloonPollingProperty, 5) })
	req := f.recv()
	if want := `{"path":"/machine/peripheral/balloon0","property":"guest-stats-polling-interval","value":5}`; req.Execute != "qom-set" || string(req.Arguments) != want {
		t.Errorf("sent %s %s, want qom-set %s", req.Execute, req.Arguments, want)
	}
	f.reply(req, "{}")
	if err := waitErr(t, done); err != nil {
		t.Fatal(err)
	}

	var got BalloonGuestStats
	done = async(func() error {
		var err error
		got, err = m.QueryBalloonGuestStats(ctxT(t), "/machine/peripheral/balloon0")
		return err
	})
	req = f.recv()
	if want := `{"path":"/machine/peripheral/balloon0","property":"guest-stats"}`; req.Execute != "qom-get" || string(req.Arguments) != want {
		t.Errorf("sent %s %s, want qom-get %s", req.Execute, req.Arguments, want)
	}
	f.reply(req, `{"stats":{"stat-swap-out":0,"stat-available-memory":98304000,"stat-free-memory":90112000,"stat-minor-faults":4096,`+
		`"stat-major-faults":12,"stat-total-memory":123904000,"stat-swap-in":0,"stat-disk-caches":-1,"stat-htlb-pgalloc":0,"stat-htlb-pgfail":0},"last-update":1764038000}`)
	if err := waitErr(t, done); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(got)
	want := `{"stats":{"stat-swap-in":0,"stat-swap-out":0,"stat-major-faults":12,"stat-minor-faults":4096,"stat-free-memory":90112000,` +
		`"stat-total-memory":123904000,"stat-available-memory":98304000,"stat-disk-caches":-1},"last-update":1764038000}`
	if string(b) != want {
		t.Errorf("decoded %s\nwant    %s", b, want)
	}
}

func TestMigrationStatusMoving(t *testing.T) {
	for status, want := range map[string]bool{
		MigrationStatusNone: false, MigrationStatusSetup: true, MigrationStatusActive: true, MigrationStatusPostcopyActive: true,
		MigrationStatusPreSwitchover: true, MigrationStatusDevice: true, MigrationStatusCompleted: false, MigrationStatusFailed: false,
		MigrationStatusCancelling: false, MigrationStatusCancelled: false, "": false,
	} {
		if got := MigrationStatusMoving(status); got != want {
			t.Errorf("MigrationStatusMoving(%q) = %v, want %v", status, got, want)
		}
	}
}
