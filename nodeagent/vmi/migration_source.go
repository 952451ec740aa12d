package vmi

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/launcher/rpc"
	"github.com/kemu-dev/kemu/nodeagent/launcherclient"
	"github.com/kemu-dev/kemu/nodeagent/migrationproxy"
)

// syncSource does the source role's work for the VMI's source launcher
// st: Migrate once the target is ready, the progress and outcome into
// migrationState, CancelMigration on an abort, FinalizeMigration once the
// target runs. write: the node agent may write the VMI (false after the
// handoff: the VMI is the target node's then, and only FinalizeMigration
// is left). It returns the writes and when to look again.
func (c *Controller) syncSource(ctx context.Context, st *launcherState, vmi *v1.VirtualMachineInstance, write bool) ([]migrationWrite, time.Duration) {
	ms := vmi.Status.MigrationState
	if st.client == nil || c.cfg.Migrations == nil {
		return nil, 0
	}
	if ms != nil && (ms.SourceNode != c.cfg.NodeName || ms.SourcePod != st.podName) {
		ms = nil // another node's migration, or one from another Pod of the VMI
	}
	st.mu.Lock()
	run := st.mig
	st.mu.Unlock()
	if ms != nil && run.uid != "" && run.uid != string(ms.MigrationUID) {
		st.endMigration()
		run = migrationRun{}
	}
	d := st.getDomain()
	step := sourceAction(ms, d, run.cancelSent)
	if ms == nil {
		if run.uid != "" {
			st.endMigration()
		}
		return nil, 0
	}
	uid := string(ms.MigrationUID)
	logger := klog.FromContext(ctx).WithValues("migrationUID", uid)
	// What this process learned from its own RPCs comes first.
	switch {
	case run.startErr != "" && !ms.Failed && write:
		st.endMigration()
		return []migrationWrite{{uid: uid, change: failMigration(run.startErr)}}, 0
	case run.started && ms.StartTimestamp == nil && write:
		start := metav1.NewTime(run.startedAt)
		return []migrationWrite{{uid: uid, change: func(ms *v1.VirtualMachineInstanceMigrationState, _ metav1.Time) {
			if ms.StartTimestamp == nil {
				ms.StartTimestamp, ms.Mode = &start, v1.MigrationPreCopy
			}
		}}}, 0
	case run.cancelErr != "" && ms.AbortStatus != v1.MigrationAbortFailed && write:
		return []migrationWrite{{uid: uid, change: func(ms *v1.VirtualMachineInstanceMigrationState, _ metav1.Time) {
			ms.AbortStatus = v1.MigrationAbortFailed
		}}}, 0
	}
	if !write && step != sourceFinalize && step != sourceCleanup {
		return nil, 0
	}
	switch step {
	case sourceMigrate:
		if !run.starting && !run.started {
			c.startMigration(ctx, st, vmi)
		}
	case sourceProgress:
		if wait := StatisticsInterval - time.Since(run.statsAt); wait > 0 {
			return nil, wait
		}
		st.mu.Lock()
		st.mig.statsAt = time.Now()
		st.mu.Unlock()
		stats, m := statistics(d.GetMigration()), mode(d.GetMigration())
		return []migrationWrite{{uid: uid, change: func(ms *v1.VirtualMachineInstanceMigrationState, _ metav1.Time) {
			if stats != nil {
				ms.Statistics = stats
			}
			if m != "" {
				ms.Mode = m
			}
		}}}, StatisticsInterval
	case sourceComplete:
		stats, m := statistics(d.GetMigration()), mode(d.GetMigration())
		logger.Info("Migration completed on the source; it waits paused for the target", "mode", m)
		return []migrationWrite{{uid: uid, change: func(ms *v1.VirtualMachineInstanceMigrationState, _ metav1.Time) {
			ms.Completed, ms.Statistics = true, stats
			if m != "" {
				ms.Mode = m
			}
		}}}, 0
	case sourceFinalize:
		c.finalizeMigration(ctx, st)
	case sourceCancel:
		rctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		_, err := st.client.CancelMigration(rctx, &rpc.Empty{})
		cancel()
		countRPC("CancelMigration", err)
		st.mu.Lock()
		st.mig.uid, st.mig.cancelSent = uid, true
		if err != nil {
			st.mig.cancelErr = status.Convert(err).Message()
		}
		st.mu.Unlock()
		logger.Info("Asked the source launcher to cancel the migration", "err", err)
		c.queue.Add(st.key)
	case sourceAborted:
		return []migrationWrite{{uid: uid, change: func(ms *v1.VirtualMachineInstanceMigrationState, now metav1.Time) {
			failMigration("aborted before the migration started")(ms, now)
			ms.AbortStatus = v1.MigrationAbortSucceeded
		}}}, 0
	case sourceFail:
		st.endMigration()
		reason := failureReason(d)
		logger.Info("Migration failed; the source runs on", "reason", reason, "domainReason", d.GetReason())
		c.cfg.Recorder.Eventf(vmi, corev1.EventTypeWarning, EventMigrationFailed, "Migration %s failed; the VM runs on the source: %s", uid, reason)
		stats := statistics(d.GetMigration())
		return []migrationWrite{{uid: uid, change: func(ms *v1.VirtualMachineInstanceMigrationState, now metav1.Time) {
			failMigration(reason)(ms, now)
			if stats != nil {
				ms.Statistics = stats
			}
			if ms.AbortRequested && ms.AbortStatus != v1.MigrationAbortFailed {
				ms.AbortStatus = v1.MigrationAbortSucceeded
			}
		}}}, 0
	case sourceCleanup:
		st.endMigration()
	}
	return nil, 0
}

// startMigration listens on the proxy's source sockets in the source Pod's
// sockets directory — opened without following symlinks and bound through
// its descriptor (/proc/self/fd/<fd>/<name>) — and calls Migrate in the
// background with the sockets as the launcher sees them and the options
// of migrationConfiguration.
func (c *Controller) startMigration(ctx context.Context, st *launcherState, vmi *v1.VirtualMachineInstance) {
	ms := vmi.Status.MigrationState
	uid := string(ms.MigrationUID)
	logger := klog.FromContext(ctx).WithValues("migrationUID", uid)
	startedAt := time.Now().Truncate(time.Second)
	fail := func(err error) {
		logger.Error(err, "Starting the migration")
		st.mu.Lock()
		st.mig.uid, st.mig.startErr = uid, fmt.Sprintf("starting the migration: %v", err)
		st.mu.Unlock()
		c.queue.Add(st.key)
	}
	dir, err := launcherclient.OpenSocketsDir(st.client.Target())
	if err != nil {
		fail(err)
		return
	}
	target := migrationproxy.Target{Addr: net.JoinHostPort(ms.TargetNodeAddress, strconv.Itoa(int(ms.TargetMigrationPort))), Node: ms.TargetNode}
	src, err := c.cfg.Migrations.ListenSource(c.baseCtx(), launcherclient.FDPath(dir), uid, migrationChannels, target)
	if err != nil {
		_ = dir.Close()
		fail(err)
		return
	}
	st.mu.Lock()
	st.mig = migrationRun{uid: uid, starting: true, startedAt: startedAt, source: src, dir: dir}
	st.mu.Unlock()
	sock := func(ch string) string { return filepath.Join(c.cfg.LauncherSocketsDir, migrationproxy.SocketName(ch)) }
	req := &rpc.MigrateRequest{MainSocket: sock(migrationproxy.ChannelMain), DiskSocket: sock(migrationproxy.ChannelDisk),
		ControlSocket: sock(migrationproxy.ChannelControl), Options: migrationOptions(ms.MigrationConfiguration)}
	logger.Info("Starting the migration", "target", target.Addr, "targetNode", target.Node)
	go func() {
		defer c.queue.Add(st.key)
		mctx, cancel := context.WithTimeout(st.ctx, syncTimeout)
		_, err := st.client.Migrate(mctx, req)
		cancel()
		countRPC("Migrate", err)
		st.mu.Lock()
		defer st.mu.Unlock()
		if st.mig.uid != uid {
			return
		}
		st.mig.starting = false
		if err != nil {
			logger.Error(err, "Migrate")
			st.mig.startErr = fmt.Sprintf("migrate: %s", status.Convert(err).Message())
			return
		}
		st.mig.started = true
	}()
}

// finalizeMigration ends the paused source once the target runs the guest
// (once; the domain's Shutoff follows through the watch).
func (c *Controller) finalizeMigration(ctx context.Context, st *launcherState) {
	st.mu.Lock()
	if st.mig.finalizing {
		st.mu.Unlock()
		return
	}
	st.mig.finalizing = true
	st.mu.Unlock()
	logger := klog.FromContext(ctx)
	go func() {
		defer c.queue.Add(st.key)
		fctx, cancel := context.WithTimeout(st.ctx, time.Minute)
		_, err := st.client.FinalizeMigration(fctx, &rpc.Empty{})
		cancel()
		countRPC("FinalizeMigration", err)
		if err != nil && status.Code(err) != codes.FailedPrecondition {
			logger.Error(err, "FinalizeMigration")
			st.mu.Lock()
			st.mig.finalizing = false
			st.mu.Unlock()
			return
		}
		logger.Info("Finalized the migration: the source ends", "err", err)
	}()
}
