package launcher

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/qmp"
)

// MigrationTarget is where a migration target listens: unix sockets in its
// runtime directory (the node agent's proxy connects to them). The source
// is given the same three, as it reaches them (the local ends of its node
// agent's proxy).
type MigrationTarget struct {
	// MainSocket carries the migration stream (migrate-incoming).
	MainSocket string
	// DiskSocket is QEMU's NBD server exporting the disks the source
	// mirrors; "" when no disk is copied.
	DiskSocket string
	// ControlSocket is the target launcher's control channel
	// (migration_control.go); "" on the source: no control channel.
	ControlSocket string
}

// migrationEvents selects the events the migration roles follow.
var migrationEvents = qmp.AnyOf(qmp.EventMigration, qmp.EventMigrationPass,
	qmp.EventBlockJobReady, qmp.EventBlockJobCompleted, qmp.EventBlockJobCancelled, qmp.EventBlockJobError)

// StartMigrationTarget starts QEMU for the VMI as StartIncoming does (the
// same command line, MAC and network identity as the source's, paused),
// with the capabilities events and late-block-activate, exports each disk
// that must be copied on an NBD server and listens for the migration. When
// the migration completes it stops the NBD server and resumes the guest
// (Running, Migrated); a failed incoming migration ends QEMU (Shutoff,
// MigrationFailed) and everything is cleaned up as after any end.
func (l *Launcher) StartMigrationTarget(ctx context.Context) (MigrationTarget, error) {
	if err := l.StartIncoming(ctx); err != nil {
		return MigrationTarget{}, err
	}
	t, err := l.listenIncoming(ctx)
	if err != nil {
		l.state.handle(event{kind: evIncomingFailed, message: err.Error()})
		_, _ = l.Kill(context.Background())
		return MigrationTarget{}, err
	}
	return t, nil
}

func (l *Launcher) listenIncoming(ctx context.Context) (MigrationTarget, error) {
	caps := []qmp.MigrationCapability{{Capability: qmp.CapEvents, State: true}, {Capability: qmp.CapLateBlockActivate, State: true}}
	if err := l.mon.MigrateSetCapabilities(ctx, caps); err != nil {
		return MigrationTarget{}, fmt.Errorf("launcher: migration target capabilities: %w", err)
	}
	// Post-copy needs userfaultfd, which QEMU's user may not be allowed:
	// the target offers it when it can, the source asks for it when allowed.
	if err := l.mon.MigrateSetCapabilities(ctx, []qmp.MigrationCapability{{Capability: qmp.CapPostcopyRAM, State: true}}); err != nil {
		klog.InfoS("The migration target cannot take post-copy", "vmi", klog.KObj(l.vmi), "err", err)
	}
	disks, err := l.copiedDisks()
	if err != nil {
		return MigrationTarget{}, err
	}
	t := MigrationTarget{MainSocket: filepath.Join(l.cfg.Dir, MigrationSocketName)}
	if len(disks) > 0 {
		t.DiskSocket = filepath.Join(l.cfg.Dir, MigrationDiskSocketName)
		if err := l.mon.NBDServerStart(ctx, t.DiskSocket); err != nil {
			return MigrationTarget{}, fmt.Errorf("launcher: migration target NBD server: %w", err)
		}
		for _, d := range disks {
			if err := l.mon.BlockExportAddNBD(ctx, "export-"+d.Node, d.Node, d.Node, true); err != nil {
				return MigrationTarget{}, fmt.Errorf("launcher: exporting disk %s for the migration: %w", d.Name, err)
			}
		}
	}
	t.ControlSocket = filepath.Join(l.cfg.Dir, MigrationControlSocketName)
	if err := l.serveControl(t.ControlSocket); err != nil {
		return MigrationTarget{}, err
	}
	sub := l.mon.Subscribe(qmp.WithFilter(qmp.AnyOf(qmp.EventMigration)), qmp.WithBuffer(64))
	if err := l.mon.MigrateIncoming(ctx, "unix:"+t.MainSocket); err != nil {
		sub.Close()
		return MigrationTarget{}, fmt.Errorf("launcher: migrate-incoming: %w", err)
	}
	mig := &Migration{Role: RoleTarget, Status: qmp.MigrationStatusSetup, Mode: ModePreCopy, Started: time.Now()}
	l.setMigration(mig)
	go l.runTarget(sub, mig, t.DiskSocket != "")
	klog.InfoS("Waiting for the incoming migration", "vmi", klog.KObj(l.vmi), "socket", t.MainSocket, "disks", len(disks))
	return t, nil
}

// runTarget follows the incoming migration to its end: completed → stop
// the NBD server and resume; failed → QEMU ends (7.2 exits by itself; the
// launcher makes sure).
func (l *Launcher) runTarget(sub *qmp.Subscription, mig *Migration, nbd bool) {
	defer sub.Close()
	ctx := context.Background()
	for {
		ev, err := sub.Next(ctx)
		var lost *qmp.EventsLostError
		if errors.As(err, &lost) {
			ev = l.migrationStatusEvent(ctx)
		} else if err != nil {
			return // QEMU ended: supervise records it
		}
		var me qmp.MigrationEvent
		if err := ev.Decode(&me); err != nil {
			continue
		}
		mig.Status = me.Status
		if me.Status == qmp.MigrationStatusPostcopyActive && mig.Mode != ModePostCopy {
			mig.Mode = ModePostCopy
			l.setMigration(mig)
			l.runPostCopy(ctx, mig)
		}
		switch me.Status {
		case qmp.MigrationStatusCompleted:
			l.finishIncoming(ctx, mig, nbd)
			return
		case qmp.MigrationStatusFailed, qmp.MigrationStatusCancelled:
			mig.Message = "the incoming migration failed"
			l.setMigration(mig)
			l.state.handle(event{kind: evIncomingFailed, message: mig.Message})
			l.endFailedIncoming()
			return
		}
		l.setMigration(mig)
	}
}

// finishIncoming resumes the guest after a completed incoming migration.
func (l *Launcher) finishIncoming(ctx context.Context, mig *Migration, nbd bool) {
	ctx, cancel := context.WithTimeout(ctx, qmpConnectTimeout)
	defer cancel()
	if info, err := l.mon.QueryMigrate(ctx); err == nil {
		mig = mig.withInfo(info)
	}
	mig.Status = qmp.MigrationStatusCompleted
	l.setMigration(mig)
	if nbd {
		if err := l.mon.NBDServerStop(ctx); err != nil {
			l.failIncoming(mig, fmt.Errorf("stopping the NBD server: %w", err))
			return
		}
	}
	if err := l.mon.Cont(ctx); err != nil {
		l.failIncoming(mig, fmt.Errorf("resuming the guest: %w", err))
		return
	}
	klog.InfoS("Incoming migration completed; the guest runs here", "vmi", klog.KObj(l.vmi))
}

// runPostCopy resumes the guest as soon as the source switched to
// post-copy (as libvirt does): the target has the devices' state, the
// guest runs here and faults in the pages still on the source. QEMU was
// started with -S, so it would otherwise stay paused until the last page
// arrived. A failure now loses the guest on both sides: post-copy's
// documented risk, taken only when allowed.
func (l *Launcher) runPostCopy(ctx context.Context, mig *Migration) {
	ctx, cancel := context.WithTimeout(ctx, qmpConnectTimeout)
	defer cancel()
	if err := l.mon.Cont(ctx); err != nil {
		l.failIncoming(mig, fmt.Errorf("resuming the guest in post-copy: %w", err))
		return
	}
	klog.InfoS("Post-copy: the guest runs on the target while its pages arrive", "vmi", klog.KObj(l.vmi))
}

// failIncoming ends a target whose guest cannot run after all.
func (l *Launcher) failIncoming(mig *Migration, err error) {
	klog.ErrorS(err, "The migration target cannot run the guest", "vmi", klog.KObj(l.vmi))
	mig.Status, mig.Message = qmp.MigrationStatusFailed, err.Error()
	l.setMigration(mig)
	l.state.handle(event{kind: evIncomingFailed, message: err.Error()})
	l.endFailedIncoming()
}

// endFailedIncoming waits a little for QEMU 7.2 to exit after a failed
// incoming migration, and kills it if it does not.
func (l *Launcher) endFailedIncoming() {
	t := time.NewTimer(quitGrace)
	defer t.Stop()
	select {
	case <-l.exited:
	case <-t.C:
		l.kill()
	}
}

// migrationStatusEvent reads the migration's status after lost events, as
// a MIGRATION event.
func (l *Launcher) migrationStatusEvent(ctx context.Context) qmp.Event {
	ctx, cancel := context.WithTimeout(ctx, qmpConnectTimeout)
	defer cancel()
	info, err := l.mon.QueryMigrate(ctx)
	if err != nil {
		return qmp.Event{}
	}
	return qmp.Event{Name: qmp.EventMigration, Raw: []byte(fmt.Sprintf(`{"event":%q,"data":{"status":%q}}`, qmp.EventMigration, info.Status))}
}
