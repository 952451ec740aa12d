package vmi

import (
	"io"
	"os"
	"time"
)

// migrationRun is what one launcher entry holds about the migration it
// takes part in (guarded by its launcherState's mu). A restarted node agent
// has none: a target waiting for a stream then fails the migration (its
// proxy route is gone), a migrating source fails by itself (its proxy
// listeners are gone) and the source agent writes that.
type migrationRun struct {
	uid string // the migration the fields are for
	// Target.
	preparing  bool
	prepared   bool // PrepareMigrationTarget answered and the proxy registered it
	prepareErr string
	unregister func()
	// Source.
	starting   bool
	startedAt  time.Time // before Migrate (startTimestamp, truncated to seconds)
	started    bool      // Migrate answered
	startErr   string
	source     io.Closer // the proxy's listeners in the Pod's sockets directory
	dir        *os.File  // that directory, verified, held while they listen
	cancelSent bool
	cancelErr  string
	finalizing bool
	statsAt    time.Time // last statistics write
}

// endMigration closes the entry's proxy side of its migration and forgets
// it.
func (s *launcherState) endMigration() {
	s.mu.Lock()
	run := s.mig
	s.mig = migrationRun{}
	s.mu.Unlock()
	run.close()
}

func (r migrationRun) close() {
	if r.unregister != nil {
		r.unregister()
	}
	if r.source != nil {
		_ = r.source.Close()
	}
	if r.dir != nil {
		_ = r.dir.Close()
	}
}
