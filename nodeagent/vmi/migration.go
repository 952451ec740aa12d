package vmi

import (
	"context"
	"io"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/launcher/rpc"
	"github.com/kemu-dev/kemu/nodeagent/migrationproxy"
)

// Migrations is this node's migration proxy as the VMI controller uses it
// (docs/migration.md, "The handoff through the API"): the target role
// registers a migration's channels, the source role listens in the source
// Pod's sockets directory.
type Migrations interface {
	// RegisterDial routes migration uid's channels, for connections from
	// sourceNode only, to the dial functions (the verified target launcher
	// sockets).
	RegisterDial(uid, sourceNode string, dials map[string]migrationproxy.DialFunc) error
	// Unregister forgets uid and ends its splices.
	Unregister(uid string)
	// ListenSource listens on dir/migrationproxy.SocketName(channel) for
	// each channel and forwards every connection to target.
	ListenSource(ctx context.Context, dir, uid string, channels []string, target migrationproxy.Target) (io.Closer, error)
}

// ProxyMigrations is Migrations on a node's migrationproxy.Server and its
// certificate store.
type ProxyMigrations struct {
	Server *migrationproxy.Server
	Store  *migrationproxy.Store
}

// RegisterDial implements Migrations.
func (p ProxyMigrations) RegisterDial(uid, sourceNode string, dials map[string]migrationproxy.DialFunc) error {
	return p.Server.RegisterDial(uid, sourceNode, dials)
}

// Unregister implements Migrations.
func (p ProxyMigrations) Unregister(uid string) { p.Server.Unregister(uid) }

// ListenSource implements Migrations.
func (p ProxyMigrations) ListenSource(ctx context.Context, dir, uid string, channels []string, target migrationproxy.Target) (io.Closer, error) {
	return migrationproxy.ListenSource(ctx, dir, uid, channels, target, p.Store)
}

// migrationChannels are the channels a migration uses.
var migrationChannels = []string{migrationproxy.ChannelMain, migrationproxy.ChannelDisk, migrationproxy.ChannelControl}

// StatisticsInterval is the least time between two writes of a running
// migration's statistics into migrationState (the final figures are
// written at once).
const StatisticsInterval = 2 * time.Second

// migrationEnded: the migration failed or the controller closed it.
func migrationEnded(ms *v1.VirtualMachineInstanceMigrationState) bool {
	return ms.Failed || ms.EndTimestamp != nil
}

// targetStep is what the target role does next.
type targetStep int

const (
	targetNone     targetStep = iota
	targetPrepare             // PrepareMigrationTarget (then Register)
	targetAnnounce            // write targetNodeAddress, targetMigrationPort, targetNodeDomainDetected
	targetReady               // write targetNodeDomainReadyTimestamp
	targetFail                // write failed, failureReason, endTimestamp
	targetCleanup             // Unregister
)

// targetAction decides the target role's next step for the target Pod
// podName from the VMI's migrationState, the target launcher's domain (nil:
// none yet) and whether this process prepared it (registered with the
// proxy).
func targetAction(ms *v1.VirtualMachineInstanceMigrationState, podName string, d *rpc.Domain, prepared bool) targetStep {
	switch {
	case ms == nil || ms.MigrationUID == "" || ms.TargetPod != podName || migrationEnded(ms):
		return targetCleanup
	case ms.TargetNodeDomainReadyTimestamp != nil:
		return targetNone
	case d != nil && d.GetState() == stateShutoff:
		return targetFail
	case d != nil && d.GetState() == stateRunning && d.GetReason() == rpc.DomainReason_Migrated:
		return targetReady
	case prepared && ms.TargetNodeAddress == "":
		return targetAnnounce
	case prepared:
		return targetNone
	case d == nil && ms.TargetNodeAddress == "":
		return targetPrepare
	case d != nil && d.GetState() == statePaused && d.GetReason() == domainReasonMigration:
		// Waiting for the stream, but not registered by this process (the
		// node agent restarted: its proxy lost the route).
		return targetFail
	}
	return targetNone
}

// sourceStep is what the source role does next.
type sourceStep int

const (
	sourceNone     sourceStep = iota
	sourceMigrate             // ListenSource, Migrate; write startTimestamp, mode
	sourceProgress            // write statistics (rate-limited)
	sourceComplete            // write completed and the final statistics
	sourceFinalize            // FinalizeMigration
	sourceCancel              // CancelMigration
	sourceAborted             // abort before Migrate: write failed, abortStatus Succeeded
	sourceFail                // write failed, failureReason, endTimestamp (and abortStatus when asked)
	sourceCleanup             // close the source listeners
)

// thisMigration says whether the domain's migration is the one
// migrationState started (the launcher's start is not before
// startTimestamp, which the node agent takes, truncated to seconds, before
// it calls Migrate).
func thisMigration(ms *v1.VirtualMachineInstanceMigrationState, d *rpc.Domain) bool {
	return ms.StartTimestamp != nil && d.GetMigration() != nil &&
		d.GetMigration().GetStartedUnixNano() >= ms.StartTimestamp.UnixNano()
}

// sourceAction decides the source role's next step from the VMI's
// migrationState and the source launcher's domain. cancelSent: this
// process asked the launcher to cancel.
func sourceAction(ms *v1.VirtualMachineInstanceMigrationState, d *rpc.Domain, cancelSent bool) sourceStep {
	if ms == nil || ms.MigrationUID == "" || d == nil {
		return sourceCleanup
	}
	state, reason := d.GetState(), d.GetReason()
	completed := state == stateMigrating && d.GetMigration().GetStatus() == "completed"
	switch {
	case state == stateMigrating && ms.Completed && ms.TargetNodeDomainReadyTimestamp != nil:
		return sourceFinalize
	case state == stateShutoff:
		return sourceCleanup
	case ms.StartTimestamp == nil:
		switch {
		case migrationEnded(ms):
			return sourceCleanup
		case ms.AbortRequested:
			return sourceAborted
		case ms.TargetNodeAddress != "" && (state == stateRunning || state == statePaused):
			return sourceMigrate
		}
		return sourceNone
	case state == stateMigrating && completed && !ms.Completed:
		return sourceComplete
	case state == stateMigrating && (ms.AbortRequested || ms.Failed) && !cancelSent && !completed:
		// Asked to abort, or failed by the controller or the target
		// (a timeout, the target Pod gone): the guest stays here. After
		// completed only the target launcher's own "failed" (the control
		// channel) resumes the source: the target may have run the guest.
		return sourceCancel
	case state == stateMigrating && !ms.Completed:
		return sourceProgress
	case (state == stateRunning || state == statePaused) &&
		(reason == rpc.DomainReason_MigrationFailed || reason == rpc.DomainReason_MigrationCanceled) &&
		thisMigration(ms, d):
		if !ms.Failed {
			return sourceFail
		}
		return sourceCleanup
	case migrationEnded(ms):
		return sourceCleanup
	}
	return sourceNone
}

// statistics are the launcher's migration figures in the API's form.
func statistics(m *rpc.MigrationState) *v1.MigrationStatistics {
	if m == nil {
		return nil
	}
	return &v1.MigrationStatistics{DataTotalBytes: m.GetBytesTotal(), DataProcessedBytes: m.GetBytesTransferred(),
		DataRemainingBytes: m.GetBytesRemaining(), Passes: m.GetPasses(), DiskTotalBytes: m.GetDiskBytesTotal(),
		DiskProcessedBytes: m.GetDiskBytesCopied(), TotalMilliseconds: m.GetTotalMs(),
		DowntimeMilliseconds: m.GetDowntimeMs(), SetupMilliseconds: m.GetSetupMs()}
}

// mode is the launcher's migration mode in the API's form ("" unknown).
func mode(m *rpc.MigrationState) v1.MigrationMode {
	switch m.GetMode() {
	case rpc.MigrationMode_PreCopy:
		return v1.MigrationPreCopy
	case rpc.MigrationMode_PostCopy:
		return v1.MigrationPostCopy
	}
	return ""
}

// migrationOptions are Migrate's options from migrationConfiguration
// (zero: the launcher's defaults).
func migrationOptions(c *v1.MigrationConfiguration) *rpc.MigrationOptions {
	o := &rpc.MigrationOptions{}
	if c == nil {
		return o
	}
	if c.BandwidthPerMigration != nil {
		o.BandwidthBytesPerSecond = max(c.BandwidthPerMigration.Value(), 0)
	}
	if c.CompletionTimeoutPerGiB != nil {
		o.CompletionTimeoutPerGibSeconds = max(*c.CompletionTimeoutPerGiB, 0)
	}
	if c.ProgressTimeout != nil {
		o.ProgressTimeoutSeconds = max(*c.ProgressTimeout, 0)
	}
	o.AllowAutoConverge = c.AllowAutoConverge != nil && *c.AllowAutoConverge
	o.AllowPostCopy = c.AllowPostCopy != nil && *c.AllowPostCopy
	return o
}

// failureReason is why the launcher's migration ended.
func failureReason(d *rpc.Domain) string {
	if msg := d.GetMigration().GetMessage(); msg != "" {
		return msg
	}
	if msg := d.GetMessage(); msg != "" {
		return msg
	}
	return d.GetReason().String()
}

// migrationWrite is a change of migrationState for migration uid; it is
// applied only while migrationState still names uid (a writer ignores a
// migrationState of another UID).
type migrationWrite struct {
	uid    string
	change func(ms *v1.VirtualMachineInstanceMigrationState, now metav1.Time)
}

// apply runs the writes on vmi.
func applyMigrationWrites(vmi *v1.VirtualMachineInstance, writes []migrationWrite, now metav1.Time) {
	for _, w := range writes {
		ms := vmi.Status.MigrationState
		if ms == nil || string(ms.MigrationUID) != w.uid {
			continue
		}
		w.change(ms, now)
	}
}
