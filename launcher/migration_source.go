package launcher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/qmp"
)

// sourceMigration is an outgoing migration: what Migrate started, what
// CancelMigration and FinalizeMigration act on.
type sourceMigration struct {
	opts       MigrationOptions
	mainSocket string
	diskSocket string
	disks      []copiedDisk
	wasRunning bool
	control    *controlClient // nil without a control channel

	cancelOnce sync.Once
	cancelCh   chan struct{} // closed by CancelMigration

	mu         sync.Mutex
	postcopy   bool // migrate-start-postcopy sent: no way back
	completed  bool // QEMU sent everything; the source waits paused
	resuming   bool // after completed: the source takes the guest back
	finalizing bool // after completed: the source quits
	ended      bool // failed or canceled: the source has the guest again
	done       chan struct{}
}

// mirror names: the NBD client node and the job of disk i.
func mirrorNode(i int) string { return fmt.Sprintf("migration-dst%d", i) }
func mirrorJob(i int) string  { return fmt.Sprintf("migration-mirror%d", i) }

// Migrate starts migrating the running (or paused) guest to the target,
// whose sockets (to.MainSocket, to.DiskSocket for the copied disks, and
// to.ControlSocket, the target launcher's control channel, when given)
// the launcher connects to; the first two it passes to QEMU. It sets the
// capabilities and parameters, attaches the target's NBD exports and
// starts the disk mirrors, and returns; the rest follows QEMU's events
// (runSource). Progress and the outcome are in Domain.Migration.
func (l *Launcher) Migrate(ctx context.Context, to MigrationTarget, opts MigrationOptions) error {
	d := l.Domain()
	if d.State != StateRunning && d.State != StatePaused {
		return fmt.Errorf("%w: the domain is %s", ErrMigrationState, d)
	}
	if to.MainSocket == "" {
		return fmt.Errorf("%w: no target socket", ErrMigrationState)
	}
	disks, err := l.copiedDisks()
	if err != nil {
		return err
	}
	if len(disks) > 0 && to.DiskSocket == "" {
		return fmt.Errorf("%w: %d disks must be copied and no disk socket was given", ErrMigrationState, len(disks))
	}
	s := &sourceMigration{opts: opts.withDefaults(), mainSocket: to.MainSocket, diskSocket: to.DiskSocket, disks: disks,
		wasRunning: d.State == StateRunning, cancelCh: make(chan struct{}), done: make(chan struct{})}
	l.migMu.Lock()
	if l.source != nil && !l.source.isEnded() {
		l.migMu.Unlock()
		return fmt.Errorf("%w: a migration is under way", ErrMigrationState)
	}
	l.source = s
	l.migMu.Unlock()

	sub := l.mon.Subscribe(qmp.WithFilter(migrationEvents), qmp.WithBuffer(1024))
	mig := &Migration{Role: RoleSource, Status: qmp.MigrationStatusSetup, Mode: ModePreCopy, Started: time.Now()}
	for _, d := range disks {
		mig.DiskBytesTotal += d.Size
	}
	l.setMigration(mig)
	l.state.handle(event{kind: evMigrationStarted})
	if to.ControlSocket != "" {
		if s.control, err = dialControl(ctx, to.ControlSocket); err != nil {
			sub.Close()
			l.abortSource(s, mig, ReasonMigrationFailed, err)
			return err
		}
	}
	if err := l.setupSource(ctx, s); err != nil {
		sub.Close()
		l.abortSource(s, mig, ReasonMigrationFailed, err)
		return err
	}
	go l.runSource(s, sub, mig)
	klog.InfoS("Migration started", "vmi", klog.KObj(l.vmi), "target", to.MainSocket, "control", s.control != nil, "disks", len(disks),
		"bandwidth", s.opts.Bandwidth, "postCopy", s.opts.AllowPostCopy, "autoConverge", s.opts.AllowAutoConverge)
	return nil
}

// setupSource sets capabilities and parameters and starts the mirrors.
func (l *Launcher) setupSource(ctx context.Context, s *sourceMigration) error {
	caps := []qmp.MigrationCapability{
		{Capability: qmp.CapEvents, State: true},
		{Capability: qmp.CapPauseBeforeSwitch, State: true},
		{Capability: qmp.CapAutoConverge, State: s.opts.AllowAutoConverge},
		{Capability: qmp.CapPostcopyRAM, State: s.opts.AllowPostCopy},
	}
	if err := l.mon.MigrateSetCapabilities(ctx, caps); err != nil {
		return fmt.Errorf("launcher: migration capabilities: %w", err)
	}
	p := qmp.MigrationParameters{MaxBandwidth: &s.opts.Bandwidth}
	if s.opts.DowntimeLimit > 0 {
		ms := s.opts.DowntimeLimit.Milliseconds()
		p.DowntimeLimit = &ms
	}
	if err := l.mon.MigrateSetParameters(ctx, p); err != nil {
		return fmt.Errorf("launcher: migration parameters: %w", err)
	}
	for i, d := range s.disks {
		// One connection per NBD client, made by the launcher and passed
		// to QEMU (migration_fd.go).
		if err := l.passSocket(ctx, migrationDiskFD(i), s.diskSocket); err != nil {
			return fmt.Errorf("launcher: attaching the target's disk %s: %w", d.Name, err)
		}
		if err := l.mon.BlockdevAddNBDFD(ctx, mirrorNode(i), migrationDiskFD(i), d.Node); err != nil {
			l.dropFD(ctx, migrationDiskFD(i))
			return fmt.Errorf("launcher: attaching the target's disk %s: %w", d.Name, err)
		}
		// top: a containerDisk's target has the same base image, so only
		// the overlay moves; an emptyDisk has no backing file (top = all).
		o := qmp.MirrorOptions{JobID: mirrorJob(i), Device: d.Node, Target: mirrorNode(i), Sync: qmp.MirrorSyncTop}
		if err := l.mon.BlockdevMirror(ctx, o); err != nil {
			return fmt.Errorf("launcher: mirroring disk %s: %w", d.Name, err)
		}
	}
	return nil
}

// errCanceled is the outcome of a canceled migration.
var errCanceled = errors.New("the migration was canceled")

// runSource drives the migration by QEMU's events to its end.
func (l *Launcher) runSource(s *sourceMigration, sub *qmp.Subscription, mig *Migration) {
	defer sub.Close()
	r := &sourceRun{l: l, s: s, mig: mig, ready: map[string]bool{}, finished: map[string]bool{}}
	err := r.loop(sub)
	switch {
	case err == nil:
		s.mu.Lock()
		s.completed = true
		s.mu.Unlock()
		// The status completed and its figures become visible in one
		// change, once FinalizeMigration accepts the call.
		c := *r.mig
		l.state.handle(event{kind: evMigrationCompleted, migration: &c})
		klog.InfoS("Migration completed; the source waits paused for the target", "vmi", klog.KObj(l.vmi),
			"total", r.mig.Total, "downtime", r.mig.Downtime, "setup", r.mig.Setup, "transferred", r.mig.BytesTransferred, "passes", r.mig.Passes)
		if s.control != nil {
			go l.followTarget(s)
		}
	case errors.Is(err, errCanceled):
		l.abortSource(s, r.mig, ReasonMigrationCanceled, err)
	default:
		l.abortSource(s, r.mig, ReasonMigrationFailed, err)
	}
	close(s.done)
}

// abortSource puts the source back in charge after a failed or canceled
// migration: mirrors and NBD nodes gone, the guest running again if it was.
func (l *Launcher) abortSource(s *sourceMigration, mig *Migration, reason Reason, cause error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	klog.InfoS("Migration ended without a switchover; the source keeps the guest", "vmi", klog.KObj(l.vmi), "reason", reason, "err", cause)
	s.control.close()
	l.removeMirrors(ctx, s)
	running := false
	if st, err := l.mon.QueryStatus(ctx); err == nil {
		running = st.Running
		if !running && s.wasRunning {
			if err := l.mon.Cont(ctx); err != nil {
				klog.ErrorS(err, "Resuming the source after the migration", "vmi", klog.KObj(l.vmi))
			} else {
				running = true
			}
		}
	}
	s.mu.Lock()
	s.ended = true
	s.mu.Unlock()
	if mig.Status != qmp.MigrationStatusCancelled && mig.Status != qmp.MigrationStatusFailed {
		mig.Status = qmp.MigrationStatusFailed
		if reason == ReasonMigrationCanceled {
			mig.Status = qmp.MigrationStatusCancelled
		}
	}
	mig.Message = cause.Error()
	l.setMigration(mig)
	l.state.handle(event{kind: evMigrationAborted, running: running, reason: reason, message: cause.Error()})
}

// removeMirrors cancels the mirror jobs still there and removes the NBD
// client nodes, polling QEMU's job list until the jobs are gone.
func (l *Launcher) removeMirrors(ctx context.Context, s *sourceMigration) {
	if len(s.disks) == 0 {
		return
	}
	for i := range s.disks {
		_ = l.mon.BlockJobCancel(ctx, mirrorJob(i), true)
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		jobs, err := l.mon.QueryBlockJobs(ctx)
		if err != nil || len(jobs) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			klog.ErrorS(ctx.Err(), "Mirror jobs still there after the migration", "jobs", len(jobs))
			return
		case <-tick.C:
		}
	}
	for i := range s.disks {
		if err := l.mon.BlockdevDel(ctx, mirrorNode(i)); err != nil {
			klog.V(2).InfoS("Removing a migration NBD node", "node", mirrorNode(i), "err", err)
		}
	}
}

// claim sets *flag (resuming or finalizing) when the migration completed
// and neither happened yet: the one way out of a completed migration.
func (s *sourceMigration) claim(flag *bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.completed || s.ended || s.resuming || s.finalizing {
		return false
	}
	*flag = true
	return true
}

// followTarget reads the control channel after the source completed: a
// target that says failed (its QEMU is gone) gives the guest back to the
// source at once; running or a lost channel leave the decision to the
// orchestrator (FinalizeMigration or CancelMigration).
func (l *Launcher) followTarget(s *sourceMigration) {
	for m := range s.control.updates {
		switch m.State {
		case ControlRunning:
			klog.InfoS("The migration target runs the guest", "vmi", klog.KObj(l.vmi))
			return
		case ControlFailed:
			if s.claim(&s.resuming) {
				l.abortSource(s, l.migrationOf(), ReasonMigrationFailed, fmt.Errorf("the target did not take the guest: %s", m.Message))
			}
			return
		}
	}
	klog.InfoS("The migration control channel ended after completion; waiting for finalize or cancel", "vmi", klog.KObj(l.vmi), "err", s.control.ended())
}

func (s *sourceMigration) isEnded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

// CancelMigration cancels the outgoing migration before the switchover:
// the guest keeps running on the source. After the source's migration
// completed (the target failed to take the guest), it resumes the
// source — refused while the control channel says the target runs or is
// about to (two copies of the guest must never run). It returns once the
// source has the guest again.
func (l *Launcher) CancelMigration(ctx context.Context) error {
	l.migMu.Lock()
	s := l.source
	l.migMu.Unlock()
	if s == nil || s.isEnded() {
		return fmt.Errorf("%w: no migration under way", ErrMigrationState)
	}
	s.mu.Lock()
	postcopy, completed := s.postcopy, s.completed
	s.mu.Unlock()
	switch {
	case postcopy:
		return ErrPostCopy
	case completed:
		// QEMU sent everything. Resuming the source is safe only if the
		// target will not run the guest: with a control channel, only
		// once the target said failed (then followTarget resumed it) or
		// the channel is gone (the operator's call); without one, the
		// caller's.
		if s.control != nil && s.control.targetMayRun() {
			return fmt.Errorf("%w: the migration completed and the target runs (or is resuming) the guest: finalize instead", ErrMigrationState)
		}
		if !s.claim(&s.resuming) {
			return fmt.Errorf("%w: the source is already ending", ErrMigrationState)
		}
		l.abortSource(s, l.migrationOf(), ReasonMigrationFailed, errors.New("the target did not take the guest"))
		return nil
	}
	s.cancelOnce.Do(func() { close(s.cancelCh) })
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// FinalizeMigration ends the source after the target runs the guest:
// QEMU quits, the domain ends Shutoff (Migrated).
func (l *Launcher) FinalizeMigration(ctx context.Context) (Domain, error) {
	l.migMu.Lock()
	s := l.source
	l.migMu.Unlock()
	if s == nil {
		return l.Domain(), fmt.Errorf("%w: no migration", ErrMigrationState)
	}
	if !s.claim(&s.finalizing) {
		return l.Domain(), fmt.Errorf("%w: the migration has not completed, or the source is resuming", ErrMigrationState)
	}
	s.control.close()
	l.state.handle(event{kind: evMigrationFinal})
	return l.Stop(ctx)
}

// migrationOf returns a copy of the domain's migration figures.
func (l *Launcher) migrationOf() *Migration {
	if m := l.Domain().Migration; m != nil {
		c := *m
		return &c
	}
	return &Migration{Role: RoleSource}
}
