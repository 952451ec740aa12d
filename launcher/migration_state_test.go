package launcher

import (
	"testing"
	"time"

	"github.com/kemu-dev/kemu/qmp"
)

// evMigrationCompleted publishes the final figures with the status
// completed in one change; without figures it keeps the last ones.
func TestMigrationCompletedCarriesFigures(t *testing.T) {
	active := &Migration{Role: RoleSource, Status: qmp.MigrationStatusActive, Total: 300 * time.Millisecond}
	final := &Migration{Role: RoleSource, Status: qmp.MigrationStatusCompleted, Total: 333 * time.Millisecond, Downtime: 169 * time.Millisecond}
	for _, tt := range []struct {
		name string
		ev   event
		want *Migration
	}{
		{"with the final figures", event{kind: evMigrationCompleted, migration: final}, final},
		{"without figures", event{kind: evMigrationCompleted}, active},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d, m := transition(Domain{State: StateRunning}, memory{}, event{kind: evMigrationStarted})
			d, m = transition(d, m, event{kind: evMigrationProgress, migration: active})
			d, _ = transition(d, m, tt.ev)
			if d.Migration != tt.want || d.State != StateMigrating {
				t.Errorf("got %s %+v, want Migrating %+v", d, d.Migration, tt.want)
			}
		})
	}
}
