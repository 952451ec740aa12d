package launcher

import (
	"errors"
	"fmt"
	"time"

	"github.com/kemu-dev/kemu/launcher/cmdline"
	"github.com/kemu-dev/kemu/launcher/rpc"
	"github.com/kemu-dev/kemu/launcher/storage"
	"github.com/kemu-dev/kemu/qmp"
)

// The target's migration sockets, in its runtime directory: QEMU listens
// on the first two (migrate-incoming and its NBD server), the launcher on
// the control socket (migration_control.go).
const (
	MigrationSocketName        = "migration.sock"
	MigrationDiskSocketName    = "migration-nbd.sock"
	MigrationControlSocketName = "migration-control.sock"
)

// Migration policy defaults (KubeVirt's).
const (
	DefaultCompletionTimeoutPerGiB = 150 * time.Second
	DefaultProgressTimeout         = 150 * time.Second
	// DefaultMigrationBandwidth is max-bandwidth when none is asked for:
	// always set, since QEMU's own default (32 MiB/s) throttles.
	DefaultMigrationBandwidth = 1 << 40
)

// MigrationRole and MigrationMode are the command API's enums.
type (
	MigrationRole = rpc.MigrationRole
	MigrationMode = rpc.MigrationMode
)

// Roles and modes.
const (
	RoleSource   = rpc.MigrationRole_Source
	RoleTarget   = rpc.MigrationRole_Target
	ModePreCopy  = rpc.MigrationMode_PreCopy
	ModePostCopy = rpc.MigrationMode_PostCopy
)

// Errors of the migration API (the command server maps them to codes).
var (
	// ErrMigrationState: the domain is not in a state that allows the call.
	ErrMigrationState = errors.New("launcher: not possible in the migration's state")
	// ErrPostCopy: the migration switched to post-copy: the source no
	// longer holds the guest, it cannot be canceled.
	ErrPostCopy = errors.New("launcher: the migration is in post-copy: it cannot be canceled")
)

// Migration is a migration's progress and outcome, as Domain.Migration.
type Migration struct {
	Role   MigrationRole
	Status string // QEMU's MigrationStatus (qmp.MigrationStatus*)
	Mode   MigrationMode
	// RAM, from query-migrate.
	BytesTotal, BytesTransferred, BytesRemaining int64
	DirtyPagesRate, Passes                       int64
	Downtime, Total, Setup                       time.Duration
	// Disks mirrored to the target (source only).
	DiskBytesTotal, DiskBytesCopied int64
	Message                         string
	Started                         time.Time
}

// withInfo returns a copy of m with query-migrate's figures.
func (m Migration) withInfo(i qmp.MigrationInfo) *Migration {
	if i.Status != "" {
		m.Status = i.Status
	}
	if i.Status == qmp.MigrationStatusPostcopyActive {
		m.Mode = ModePostCopy
	}
	if r := i.RAM; r != nil {
		m.BytesTotal, m.BytesTransferred, m.BytesRemaining = r.Total, r.Transferred, r.Remaining
		m.DirtyPagesRate, m.Passes = r.DirtyPagesRate, r.DirtySyncCount
	}
	m.Downtime = time.Duration(i.Downtime) * time.Millisecond
	m.Total = time.Duration(i.TotalTime) * time.Millisecond
	m.Setup = time.Duration(i.SetupTime) * time.Millisecond
	if i.ErrorDesc != "" {
		m.Message = i.ErrorDesc
	}
	return &m
}

// MigrationOptions are a migration's policies (zero values: the defaults).
type MigrationOptions struct {
	// Bandwidth is max-bandwidth in bytes per second.
	Bandwidth int64
	// DowntimeLimit is the longest pause at the switchover (0: QEMU's 300 ms).
	DowntimeLimit time.Duration
	// CompletionTimeoutPerGiB × (RAM + copied disks in GiB) bounds the
	// whole migration.
	CompletionTimeoutPerGiB time.Duration
	// ProgressTimeout cancels a migration whose remaining data did not
	// decrease for that long.
	ProgressTimeout   time.Duration
	AllowAutoConverge bool
	AllowPostCopy     bool
}

func (o MigrationOptions) withDefaults() MigrationOptions {
	if o.Bandwidth <= 0 {
		o.Bandwidth = DefaultMigrationBandwidth
	}
	if o.CompletionTimeoutPerGiB <= 0 {
		o.CompletionTimeoutPerGiB = DefaultCompletionTimeoutPerGiB
	}
	if o.ProgressTimeout <= 0 {
		o.ProgressTimeout = DefaultProgressTimeout
	}
	return o
}

// completionTimeout is the time the whole migration may take: per GiB of
// RAM and copied disks, at least one GiB's worth.
func completionTimeout(perGiB time.Duration, bytes int64) time.Duration {
	const gib = 1 << 30
	gibs := (bytes + gib - 1) / gib
	if gibs < 1 {
		gibs = 1
	}
	return time.Duration(gibs) * perGiB
}

// copiedDisk is a disk that lives only on this node and moves with the
// guest: its format node is exported by the target's NBD server and
// mirrored into by the source.
type copiedDisk struct {
	Name string // the VMI disk (and volume) name
	Node string // the format node: the NBD export name on the target
	Size int64
}

// copiedDisks lists the VM's disks that must be copied: writable
// containerDisk and ephemeral overlays and emptyDisks (an overlay's target
// has the same base: the image, or the claim, which both nodes attach).
// Shared storage (PVCs, hostDisks)
// is not copied, nor are disks nobody writes (read-only disks, the
// cloud-init ISO the target makes itself from the same VMI).
func (l *Launcher) copiedDisks() ([]copiedDisk, error) {
	var out []copiedDisk
	for _, d := range l.vmi.Spec.Domain.Devices.Disks {
		v, ok := l.prepared.Volumes[d.Name]
		if !ok {
			return nil, fmt.Errorf("launcher: disk %s has no prepared volume", d.Name)
		}
		if v.ReadOnly || d.CDRom != nil || (d.Disk != nil && d.Disk.ReadOnly) {
			continue
		}
		switch v.Kind {
		case storage.KindContainerDisk, storage.KindEmptyDisk, storage.KindEphemeral:
			out = append(out, copiedDisk{Name: d.Name, Node: cmdline.NodeName(d.Name), Size: v.Size})
		}
	}
	return out, nil
}

// guestMemory is the guest's RAM in bytes (for the completion timeout).
func (l *Launcher) guestMemory() int64 {
	if m := l.vmi.Spec.Domain.Memory; m != nil && m.Guest != nil {
		return m.Guest.Value()
	}
	return 0
}

// setMigration records new figures of the migration in the domain.
func (l *Launcher) setMigration(m *Migration) {
	c := *m
	l.state.handle(event{kind: evMigrationProgress, migration: &c})
}
