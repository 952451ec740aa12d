package qmp

import (
	"context"
	"encoding/json"
	"fmt"
)

// Live migration and storage copy: the commands and events the launcher's
// migration source and target use besides those in commands.go, as QEMU
// 7.2's QAPI schema (qapi/migration.json, block-core.json, block-export.json)
// spells them.

// Migration statuses (QAPI MigrationStatus), in query-migrate and in the
// MIGRATION event.
const (
	MigrationStatusNone           = "none"
	MigrationStatusSetup          = "setup"
	MigrationStatusActive         = "active"
	MigrationStatusPostcopyActive = "postcopy-active"
	MigrationStatusPreSwitchover  = "pre-switchover"
	MigrationStatusDevice         = "device"
	MigrationStatusCompleted      = "completed"
	MigrationStatusFailed         = "failed"
	MigrationStatusCancelling     = "cancelling"
	MigrationStatusCancelled      = "cancelled"
)

// MigrationStatusMoving says whether a migration in that status is under
// way, its memory moving or about to: setup, active, postcopy-active,
// pre-switchover, device.
func MigrationStatusMoving(status string) bool {
	switch status {
	case MigrationStatusSetup, MigrationStatusActive, MigrationStatusPostcopyActive, MigrationStatusPreSwitchover, MigrationStatusDevice:
		return true
	}
	return false
}

// Migration capabilities kemu sets (QAPI MigrationCapability).
const (
	CapEvents            = "events"
	CapPauseBeforeSwitch = "pause-before-switchover"
	CapLateBlockActivate = "late-block-activate"
	CapAutoConverge      = "auto-converge"
	CapPostcopyRAM       = "postcopy-ram"
)

// Block job and export names.
const (
	BlockJobTypeMirror    = "mirror"
	MirrorSyncFull        = "full" // the whole disk
	MirrorSyncTop         = "top"  // only the top image
	BlockExportTypeNBD    = "nbd"
	SocketAddressTypeUnix = "unix"
	SocketAddressTypeFD   = "fd"
)

// Events of migration and block jobs.
const (
	EventMigration         = "MIGRATION"           // data: status
	EventMigrationPass     = "MIGRATION_PASS"      // data: pass
	EventBlockJobReady     = "BLOCK_JOB_READY"     // data: BlockJobEvent
	EventBlockJobCompleted = "BLOCK_JOB_COMPLETED" // data: BlockJobEvent (error set on failure)
	EventBlockJobCancelled = "BLOCK_JOB_CANCELLED" // data: BlockJobEvent
	EventBlockJobError     = "BLOCK_JOB_ERROR"     // data: BlockJobErrorEvent
)

// MigrationEvent is the MIGRATION event's data.
type MigrationEvent struct {
	Status string `json:"status"`
}

// MigrationPassEvent is the MIGRATION_PASS event's data: the RAM pass that
// starts (from 1).
type MigrationPassEvent struct {
	Pass int64 `json:"pass"`
}

// BlockJobEvent is the data of BLOCK_JOB_READY, BLOCK_JOB_COMPLETED and
// BLOCK_JOB_CANCELLED.
type BlockJobEvent struct {
	Type   string `json:"type"`   // mirror, commit, stream, backup
	Device string `json:"device"` // the job id
	Len    int64  `json:"len"`
	Offset int64  `json:"offset"`
	Speed  int64  `json:"speed"`
	Error  string `json:"error,omitempty"` // BLOCK_JOB_COMPLETED only: why the job failed
}

// BlockJobErrorEvent is BLOCK_JOB_ERROR's data.
type BlockJobErrorEvent struct {
	Device    string `json:"device"`    // the job id
	Operation string `json:"operation"` // read or write
	Action    string `json:"action"`    // ignore, report, stop
}

// Decode decodes the event's data into v (one of the *Event types above).
func (e Event) Decode(v any) error {
	var msg struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(e.Raw, &msg); err != nil {
		return fmt.Errorf("qmp: event %s: %w", e.Name, err)
	}
	if len(msg.Data) == 0 {
		return fmt.Errorf("qmp: event %s has no data", e.Name)
	}
	if err := json.Unmarshal(msg.Data, v); err != nil {
		return fmt.Errorf("qmp: event %s: decoding its data: %w", e.Name, err)
	}
	return nil
}

// BlockJobInfo is one entry of query-block-jobs.
type BlockJobInfo struct {
	Type   string `json:"type"`
	Device string `json:"device"` // the job id
	Len    int64  `json:"len"`
	Offset int64  `json:"offset"`
	Busy   bool   `json:"busy"`
	Paused bool   `json:"paused"`
	Speed  int64  `json:"speed"`
	Ready  bool   `json:"ready"`
	// Status: undefined, created, running, paused, ready, standby, waiting,
	// pending, aborting, concluded, null.
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

// MirrorOptions are blockdev-mirror's arguments kemu uses.
type MirrorOptions struct {
	JobID  string `json:"job-id"`
	Device string `json:"device"` // the source node
	Target string `json:"target"` // the target node
	// Sync is MirrorSyncFull (the whole disk) or MirrorSyncTop (only the
	// top image, the target has the same backing chain).
	Sync  string `json:"sync"`
	Speed int64  `json:"speed,omitempty"` // bytes per second, 0 = unlimited
	// AutoDismiss false keeps a concluded job until job-dismiss; kemu
	// leaves QEMU's default (true).
	AutoDismiss *bool `json:"auto-dismiss,omitempty"`
}

// MigrateContinue lets a migration paused in state (pre-switchover, with
// the pause-before-switchover capability) go on.
func (m *Monitor) MigrateContinue(ctx context.Context, state string) error {
	return m.Execute(ctx, "migrate-continue", map[string]any{"state": state}, nil)
}

// unixAddr is a SocketAddress of type unix (the flat form blockdev-add's
// nbd server takes).
type unixAddr struct {
	Type string `json:"type"`
	Path string `json:"path"`
}

// fdAddr is a SocketAddress of type fd: a descriptor passed with getfd
// under the name Str (QEMU's String member).
type fdAddr struct {
	Type string `json:"type"`
	Str  string `json:"str"`
}

// NBDServerStart starts QEMU's NBD server listening on the unix socket path.
func (m *Monitor) NBDServerStart(ctx context.Context, path string) error {
	// nbd-server-start takes the legacy SocketAddress: {type, data: {path}}.
	args := map[string]any{"addr": map[string]any{"type": SocketAddressTypeUnix, "data": map[string]any{"path": path}}}
	return m.Execute(ctx, "nbd-server-start", args, nil)
}

// BlockExportAddNBD exports the block node nodeName on the NBD server
// under the export name name (id names the export for block-export-del).
func (m *Monitor) BlockExportAddNBD(ctx context.Context, id, nodeName, name string, writable bool) error {
	args := map[string]any{"type": BlockExportTypeNBD, "id": id, "node-name": nodeName, "name": name, "writable": writable}
	return m.Execute(ctx, "block-export-add", args, nil)
}

// NBDServerStop stops the NBD server and removes its exports.
func (m *Monitor) NBDServerStop(ctx context.Context) error {
	return m.Execute(ctx, "nbd-server-stop", nil, nil)
}

// BlockdevAddNBD adds nodeName, an NBD client of export on the server at
// the unix socket path.
func (m *Monitor) BlockdevAddNBD(ctx context.Context, nodeName, path, export string) error {
	return m.BlockdevAdd(ctx, map[string]any{
		"driver": "nbd", "node-name": nodeName, "export": export,
		"server": unixAddr{Type: SocketAddressTypeUnix, Path: path},
	})
}

// BlockdevAddNBDFD adds nodeName, an NBD client of export over the
// connected socket passed with getfd under fdName; QEMU takes the
// descriptor (a later closefd of that name fails).
func (m *Monitor) BlockdevAddNBDFD(ctx context.Context, nodeName, fdName, export string) error {
	return m.BlockdevAdd(ctx, map[string]any{
		"driver": "nbd", "node-name": nodeName, "export": export,
		"server": fdAddr{Type: SocketAddressTypeFD, Str: fdName},
	})
}

// BlockdevMirror starts a mirror job copying o.Device to o.Target; it
// emits BLOCK_JOB_READY once both are in sync and keeps them so.
func (m *Monitor) BlockdevMirror(ctx context.Context, o MirrorOptions) error {
	return m.Execute(ctx, "blockdev-mirror", o, nil)
}

// BlockJobComplete ends a ready mirror job by pivoting the guest's device
// onto the target.
func (m *Monitor) BlockJobComplete(ctx context.Context, jobID string) error {
	return m.Execute(ctx, "block-job-complete", map[string]any{"device": jobID}, nil)
}

// BlockJobCancel cancels a job. A ready mirror job cancelled without force
// first brings the target in sync and then ends without pivoting
// (BLOCK_JOB_COMPLETED): the source keeps its own disk.
func (m *Monitor) BlockJobCancel(ctx context.Context, jobID string, force bool) error {
	args := map[string]any{"device": jobID}
	if force {
		args["force"] = true
	}
	return m.Execute(ctx, "block-job-cancel", args, nil)
}

// QueryBlockJobs lists the block jobs.
func (m *Monitor) QueryBlockJobs(ctx context.Context) ([]BlockJobInfo, error) {
	var j []BlockJobInfo
	return j, m.Execute(ctx, "query-block-jobs", nil, &j)
}
