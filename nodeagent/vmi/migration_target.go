package vmi

import (
	"context"
	"fmt"
	"net"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/launcher/rpc"
	"github.com/kemu-dev/kemu/nodeagent/launcherclient"
	"github.com/kemu-dev/kemu/nodeagent/migrationproxy"
)

// syncTarget does the target role's work for the target launcher st (its
// Pod pod) of vmi: PrepareMigrationTarget and the proxy's registration,
// then the migrationState fields the target node agent writes. It returns
// the writes.
func (c *Controller) syncTarget(ctx context.Context, st *launcherState, vmi *v1.VirtualMachineInstance) []migrationWrite {
	ms := vmi.Status.MigrationState
	if st.client == nil || c.cfg.Migrations == nil {
		return nil
	}
	st.mu.Lock()
	prepared, preparing, prepareErr, uid := st.mig.prepared, st.mig.preparing, st.mig.prepareErr, st.mig.uid
	st.mu.Unlock()
	if ms != nil && uid != "" && uid != string(ms.MigrationUID) {
		st.endMigration()
		prepared, preparing, prepareErr = false, false, ""
	}
	logger := klog.FromContext(ctx)
	step := targetAction(ms, st.podName, st.getDomain(), prepared)
	switch {
	case prepareErr != "" && step != targetCleanup:
		step = targetFail
	case preparing && step == targetFail && st.getDomain().GetState() != stateShutoff:
		// PrepareMigrationTarget has not answered (or the proxy not
		// registered it) yet, but the launcher's watch already shows it
		// waiting for the stream: not a lost registration.
		step = targetNone
	}
	muid := ""
	if ms != nil {
		muid = string(ms.MigrationUID)
	}
	switch step {
	case targetPrepare:
		c.prepareTarget(ctx, st, vmi)
	case targetAnnounce:
		logger.Info("Migration target ready for the stream", "migrationUID", muid, "address", c.cfg.MigrationAddress,
			"port", c.cfg.MigrationPort)
		return []migrationWrite{{uid: muid, change: func(ms *v1.VirtualMachineInstanceMigrationState, _ metav1.Time) {
			ms.TargetNodeAddress, ms.TargetMigrationPort, ms.TargetNodeDomainDetected = c.cfg.MigrationAddress, c.cfg.MigrationPort, true
		}}}
	case targetReady:
		logger.Info("The migration's target runs the guest", "migrationUID", muid)
		return []migrationWrite{{uid: muid, change: func(ms *v1.VirtualMachineInstanceMigrationState, now metav1.Time) {
			if ms.TargetNodeDomainReadyTimestamp == nil {
				ms.TargetNodeDomainReadyTimestamp = &now
			}
		}}}
	case targetFail:
		reason := prepareErr
		if reason == "" {
			if d := st.getDomain(); d.GetState() == stateShutoff {
				reason = "the target's domain ended: " + failureReason(d)
			} else {
				reason = "the target node agent lost the migration's proxy registration (restarted)"
			}
		}
		logger.Info("Migration failed on the target", "migrationUID", muid, "reason", reason)
		c.cfg.Recorder.Eventf(vmi, corev1.EventTypeWarning, EventMigrationFailed, "Migration %s failed on the target: %s", muid, reason)
		return []migrationWrite{{uid: muid, change: failMigration(reason)}}
	case targetCleanup:
		st.endMigration()
	}
	return nil
}

// failMigration marks migrationState failed (once).
func failMigration(reason string) func(*v1.VirtualMachineInstanceMigrationState, metav1.Time) {
	return func(ms *v1.VirtualMachineInstanceMigrationState, now metav1.Time) {
		if ms.Failed {
			return
		}
		ms.Failed, ms.FailureReason = true, reason
		if ms.EndTimestamp == nil {
			ms.EndTimestamp = &now
		}
	}
}

// prepareTarget calls PrepareMigrationTarget in the background (it starts
// QEMU) and registers the answered sockets with the proxy: each
// connection of a channel is a new verified dial of the socket in the
// target Pod's runtime directory (launcherclient.DialRuntimeSocket: no
// symlink, the listener in the Pod).
func (c *Controller) prepareTarget(ctx context.Context, st *launcherState, vmi *v1.VirtualMachineInstance) {
	ms := vmi.Status.MigrationState
	uid, sourceNode := string(ms.MigrationUID), ms.SourceNode
	st.mu.Lock()
	if st.mig.preparing {
		st.mu.Unlock()
		return
	}
	st.mig.uid, st.mig.preparing = uid, true
	st.mu.Unlock()
	b, err := vmiJSON(vmi)
	logger := klog.FromContext(ctx).WithValues("migrationUID", uid)
	target := st.client.Target()
	go func() {
		defer c.queue.Add(st.key)
		var resp *rpc.PrepareMigrationTargetResponse
		if err == nil {
			sctx, cancel := context.WithTimeout(st.ctx, syncTimeout)
			resp, err = st.client.PrepareMigrationTarget(sctx, &rpc.SyncRequest{VmiJson: b})
			cancel()
			countRPC("PrepareMigrationTarget", err)
		}
		if err == nil {
			st.setDomain(resp.GetDomain())
			err = c.cfg.Migrations.RegisterDial(uid, sourceNode, targetDials(target, resp))
		}
		st.mu.Lock()
		defer st.mu.Unlock()
		st.mig.preparing = false
		if err != nil {
			logger.Error(err, "Preparing the migration target")
			st.mig.prepareErr = fmt.Sprintf("preparing the target: %v", err)
			return
		}
		st.mig.prepared = true
		st.mig.unregister = func() { c.cfg.Migrations.Unregister(uid) }
		logger.Info("Migration target prepared and registered with the proxy", "sourceNode", sourceNode)
	}()
}

// targetDials are the proxy's dial functions for the sockets the target
// launcher answered, which it names as it sees them: only their file
// names are used, looked up in the Pod's runtime directory on the host.
func targetDials(t launcherclient.Target, resp *rpc.PrepareMigrationTargetResponse) map[string]migrationproxy.DialFunc {
	dials := map[string]migrationproxy.DialFunc{}
	for ch, p := range map[string]string{migrationproxy.ChannelMain: resp.GetMainSocket(),
		migrationproxy.ChannelDisk: resp.GetDiskSocket(), migrationproxy.ChannelControl: resp.GetControlSocket()} {
		if p == "" {
			continue
		}
		name := filepath.Base(p)
		dials[ch] = func(ctx context.Context) (*net.UnixConn, error) {
			return launcherclient.DialRuntimeSocket(ctx, t, name)
		}
	}
	return dials
}

// EventMigrationFailed (Warning) is recorded when a node agent writes a
// migration's failure.
const EventMigrationFailed = "MigrationFailed"
