package launcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/qmp"
)

// sourceRun is one run of the source's event loop: mirrors until ready,
// then RAM, the switchover at pre-switchover, until QEMU says completed,
// failed or cancelled.
type sourceRun struct {
	l   *Launcher
	s   *sourceMigration
	mig *Migration

	ready, finished map[string]bool // mirror jobs by id
	ramStarted      bool
	switching       bool  // migrate-continue path taken (mirrors finishing)
	abort           error // why the launcher canceled, once it did
	best            int64 // the least remaining data seen
	progressed      bool  // remaining decreased since the last check
	cancelReq       bool  // CancelMigration arrived
}

type eventOrErr struct {
	ev  qmp.Event
	err error
}

// pump forwards sub's events to a channel until ctx ends.
func pump(ctx context.Context, sub *qmp.Subscription) <-chan eventOrErr {
	ch := make(chan eventOrErr)
	go func() {
		for {
			ev, err := sub.Next(ctx)
			select {
			case ch <- eventOrErr{ev, err}:
			case <-ctx.Done():
				return
			}
			var lost *qmp.EventsLostError
			if err != nil && !errors.As(err, &lost) {
				return
			}
		}
	}()
	return ch
}

func (r *sourceRun) loop(sub *qmp.Subscription) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := pump(ctx, sub)
	var total int64
	for _, d := range r.s.disks {
		total += d.Size
	}
	completion := time.NewTimer(completionTimeout(r.s.opts.CompletionTimeoutPerGiB, r.l.guestMemory()+total))
	defer completion.Stop()
	progress := time.NewTicker(r.s.opts.ProgressTimeout)
	defer progress.Stop()
	r.best = -1
	cancelCh := r.s.cancelCh
	var control <-chan controlMessage
	if r.s.control != nil {
		control = r.s.control.updates
	}
	if len(r.s.disks) == 0 {
		if err := r.startRAM(ctx); err != nil {
			return err
		}
	}
	for {
		select {
		case <-cancelCh:
			cancelCh = nil
			r.cancelReq = true
			if err := r.cancel(ctx, errCanceled); err != nil {
				return err
			}
		case m, ok := <-control:
			if err := r.controlUpdate(ctx, m, ok); err != nil {
				return err
			}
			if !ok || m.State != ControlWaiting {
				control = nil
			}
		case <-completion.C:
			if err := r.completionTimeout(ctx); err != nil {
				return err
			}
		case <-progress.C:
			if err := r.checkProgress(ctx); err != nil {
				return err
			}
		case e := <-events:
			var lost *qmp.EventsLostError
			switch {
			case errors.As(e.err, &lost):
				e.ev = r.l.migrationStatusEvent(ctx)
			case e.err != nil:
				return fmt.Errorf("QEMU's monitor: %w", e.err)
			}
			done, err := r.handle(ctx, e.ev)
			if done || err != nil {
				return err
			}
		}
	}
}

// cancel stops the migration for cause: before RAM moves the caller ends
// at once; afterwards migrate_cancel and wait for QEMU's cancelled.
func (r *sourceRun) cancel(ctx context.Context, cause error) error {
	if r.abort == nil {
		r.abort = cause
	}
	if !r.ramStarted {
		return r.abort
	}
	if err := r.l.mon.MigrateCancel(ctx); err != nil {
		return fmt.Errorf("migrate_cancel: %w (after: %v)", err, cause)
	}
	return nil
}

// controlUpdate reacts to the target's control channel before the
// source completed: a channel gone before the switchover, or a target
// that failed, cancels; after migrate-continue QEMU's own outcome decides.
func (r *sourceRun) controlUpdate(ctx context.Context, m controlMessage, ok bool) error {
	switch {
	case !ok && !r.switching:
		return r.cancel(ctx, fmt.Errorf("the migration control channel to the target is gone: %v", r.s.control.ended()))
	case ok && m.State == ControlFailed:
		return r.cancel(ctx, fmt.Errorf("the target failed: %s", m.Message))
	}
	return nil
}

// controlLost says why the control channel is gone, nil while it is up
// (or when there is none).
func (r *sourceRun) controlLost() error {
	if r.s.control == nil {
		return nil
	}
	if err := r.s.control.ended(); err != nil {
		return fmt.Errorf("the migration control channel to the target is gone: %w", err)
	}
	return nil
}

// completionTimeout switches to post-copy when allowed, else cancels.
func (r *sourceRun) completionTimeout(ctx context.Context) error {
	if r.s.opts.AllowPostCopy && r.ramStarted && !r.switching {
		if err := r.l.mon.MigrateStartPostcopy(ctx); err != nil {
			return r.cancel(ctx, fmt.Errorf("completion timeout; post-copy refused: %w", err))
		}
		r.s.mu.Lock()
		r.s.postcopy = true
		r.s.mu.Unlock()
		r.mig.Mode = ModePostCopy
		r.l.setMigration(r.mig)
		klog.InfoS("Migration switched to post-copy at the completion timeout", "vmi", klog.KObj(r.l.vmi))
		return nil
	}
	return r.cancel(ctx, errors.New("the migration did not complete within its completion timeout"))
}

// checkProgress cancels when the remaining data did not decrease since
// the last check (one progress timeout ago).
func (r *sourceRun) checkProgress(ctx context.Context) error {
	if r.switching || r.mig.Mode == ModePostCopy {
		return nil
	}
	remaining, err := r.remaining(ctx)
	if err != nil {
		return err
	}
	if r.best < 0 || remaining < r.best {
		r.best = remaining
		r.progressed = false
		return nil
	}
	if r.progressed {
		r.progressed = false
		return nil
	}
	return r.cancel(ctx, fmt.Errorf("no progress: %d bytes remaining for %s", remaining, r.s.opts.ProgressTimeout))
}

// remaining is what is left to send: RAM once it moves, the mirrors' before.
func (r *sourceRun) remaining(ctx context.Context) (int64, error) {
	if r.ramStarted {
		info, err := r.l.mon.QueryMigrate(ctx)
		if err != nil {
			return 0, fmt.Errorf("query-migrate: %w", err)
		}
		r.update(info)
		if info.RAM == nil {
			return 0, nil
		}
		return info.RAM.Remaining, nil
	}
	jobs, err := r.l.mon.QueryBlockJobs(ctx)
	if err != nil {
		return 0, fmt.Errorf("query-block-jobs: %w", err)
	}
	var left, copied int64
	for _, j := range jobs {
		left += j.Len - j.Offset
		copied += j.Offset
	}
	r.mig.DiskBytesCopied = copied
	r.l.setMigration(r.mig)
	return left, nil
}

func (r *sourceRun) update(info qmp.MigrationInfo) {
	if info.Status == qmp.MigrationStatusCompleted {
		// A query racing QEMU's completion: its times are not set yet;
		// the MIGRATION event follows and final publishes them.
		return
	}
	r.mig = r.mig.withInfo(info)
	if info.RAM != nil && r.best >= 0 && info.RAM.Remaining < r.best {
		r.best, r.progressed = info.RAM.Remaining, true
	}
	r.l.setMigration(r.mig)
}

// startRAM starts moving RAM, once the disks are in sync.
func (r *sourceRun) startRAM(ctx context.Context) error {
	if err := r.l.passSocket(ctx, migrationMainFD, r.s.mainSocket); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if err := r.l.mon.Migrate(ctx, "fd:"+migrationMainFD); err != nil {
		r.l.dropFD(ctx, migrationMainFD)
		return fmt.Errorf("migrate: %w", err)
	}
	r.ramStarted = true
	r.best = -1
	return nil
}

// handle reacts to one event; done when the migration ended (err nil:
// completed).
func (r *sourceRun) handle(ctx context.Context, ev qmp.Event) (bool, error) {
	switch ev.Name {
	case qmp.EventBlockJobReady:
		var j qmp.BlockJobEvent
		if ev.Decode(&j) != nil || r.ramStarted {
			return false, nil
		}
		r.ready[j.Device] = true
		r.mig.DiskBytesCopied += j.Offset
		r.l.setMigration(r.mig)
		if len(r.ready) == len(r.s.disks) && r.abort == nil {
			return false, r.startRAM(ctx)
		}
	case qmp.EventBlockJobCompleted, qmp.EventBlockJobCancelled:
		var j qmp.BlockJobEvent
		if ev.Decode(&j) != nil {
			return false, nil
		}
		if !r.switching || ev.Name == qmp.EventBlockJobCancelled || j.Error != "" {
			return false, r.cancel(ctx, fmt.Errorf("disk mirror %s ended: %s %s", j.Device, ev.Name, j.Error))
		}
		r.finished[j.Device] = true
		if len(r.finished) == len(r.s.disks) {
			return false, r.continueSwitchover(ctx)
		}
	case qmp.EventBlockJobError:
		var j qmp.BlockJobErrorEvent
		_ = ev.Decode(&j)
		klog.InfoS("Disk mirror I/O error", "vmi", klog.KObj(r.l.vmi), "job", j.Device, "operation", j.Operation, "action", j.Action)
	case qmp.EventMigrationPass:
		info, err := r.l.mon.QueryMigrate(ctx)
		if err == nil {
			r.update(info)
		}
	case qmp.EventMigration:
		var m qmp.MigrationEvent
		if ev.Decode(&m) != nil {
			return false, nil
		}
		return r.status(ctx, m.Status)
	}
	return false, nil
}

// status reacts to the migration's new status.
func (r *sourceRun) status(ctx context.Context, st string) (bool, error) {
	if st == qmp.MigrationStatusCompleted {
		// Published with its final figures only: a watcher that sees
		// completed reads QEMU's total and downtime.
		return true, r.final(ctx)
	}
	r.mig.Status = st
	r.l.setMigration(r.mig)
	switch st {
	case qmp.MigrationStatusPreSwitchover:
		if r.abort != nil || r.cancelReq {
			return false, r.cancel(ctx, errCanceled)
		}
		// The last point of return: the target must still be there.
		if err := r.controlLost(); err != nil {
			return false, r.cancel(ctx, err)
		}
		r.switching = true
		if len(r.s.disks) == 0 {
			return false, r.continueSwitchover(ctx)
		}
		// The guest is paused: bring each mirror's target in sync and end
		// the job without pivoting (cancel on a ready mirror), so the
		// source keeps its own disks if the switchover fails.
		for i := range r.s.disks {
			if err := r.l.mon.BlockJobCancel(ctx, mirrorJob(i), false); err != nil {
				return false, r.cancel(ctx, fmt.Errorf("finishing disk mirror %s: %w", mirrorJob(i), err))
			}
		}
	case qmp.MigrationStatusFailed:
		info, _ := r.l.mon.QueryMigrate(ctx)
		r.update(info)
		if r.abort != nil {
			return true, r.abort
		}
		return true, fmt.Errorf("QEMU: the migration failed: %s", info.ErrorDesc)
	case qmp.MigrationStatusCancelled:
		if r.abort != nil {
			return true, r.abort
		}
		return true, errCanceled
	}
	return false, nil
}

// continueSwitchover lets QEMU send the devices' state and finish.
func (r *sourceRun) continueSwitchover(ctx context.Context) error {
	if r.cancelReq || r.abort != nil {
		return r.cancel(ctx, errCanceled)
	}
	if err := r.l.mon.MigrateContinue(ctx, qmp.MigrationStatusPreSwitchover); err != nil {
		return r.cancel(ctx, fmt.Errorf("migrate-continue: %w", err))
	}
	return nil
}

// finalQueries bounds final's re-queries (20 ms apart).
const finalQueries = 50

// final reads the completed migration's figures (status completed, not
// published yet). QEMU 7.2 sends the event (and answers
// query-migrate with status completed and zero times) before it computed
// total and downtime (migration_calculate_complete), so it asks again
// until the times are there; the figures of the completion's last pass
// (status active: no downtime) are never published as completed.
// Downtime is QEMU's: from the source's vCPU stop to the end of the
// stream, the wait at pre-switchover for migrate-continue included.
func (r *sourceRun) final(ctx context.Context) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for i := 1; ; i++ {
		info, err := r.l.mon.QueryMigrate(ctx)
		if err != nil {
			return fmt.Errorf("query-migrate after completion: %w", err)
		}
		if info.TotalTime > 0 || i == finalQueries {
			r.mig = r.mig.withInfo(info)
			r.mig.Status = qmp.MigrationStatusCompleted
			return nil // runSource publishes it with evMigrationCompleted
		}
		<-tick.C
	}
}
