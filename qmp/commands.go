package qmp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"
)

// Typed requests and replies for the QMP commands kemu uses. Field names
// follow QEMU's QAPI schema (qapi/*.json) for QEMU 7.2 and later.

// VersionInfo is query-version's reply (and the greeting's version).
type VersionInfo struct {
	QEMU struct {
		Major int `json:"major"`
		Minor int `json:"minor"`
		Micro int `json:"micro"`
	} `json:"qemu"`
	Package string `json:"package"`
}

func (v VersionInfo) String() string {
	return fmt.Sprintf("%d.%d.%d", v.QEMU.Major, v.QEMU.Minor, v.QEMU.Micro)
}

// StatusInfo is query-status's reply.
type StatusInfo struct {
	Running    bool `json:"running"`
	Singlestep bool `json:"singlestep"`
	// Status is QEMU's run state: prelaunch, running, paused, postmigrate,
	// inmigrate, shutdown, guest-panicked, io-error, finish-migrate, …
	Status string `json:"status"`
}

// CommandInfo is one entry of query-commands.
type CommandInfo struct {
	Name string `json:"name"`
}

// CPUInfoFast is one entry of query-cpus-fast.
type CPUInfoFast struct {
	CPUIndex int    `json:"cpu-index"`
	QOMPath  string `json:"qom-path"`
	ThreadID int    `json:"thread-id"`
	Target   string `json:"target"`
	Props    struct {
		SocketID int `json:"socket-id"`
		CoreID   int `json:"core-id"`
		ThreadID int `json:"thread-id"`
	} `json:"props"`
}

// BlockStats is one entry of query-blockstats.
type BlockStats struct {
	Device   string `json:"device"`
	NodeName string `json:"node-name"`
	QDev     string `json:"qdev"`
	Stats    struct {
		RdBytes          int64 `json:"rd_bytes"`
		WrBytes          int64 `json:"wr_bytes"`
		RdOperations     int64 `json:"rd_operations"`
		WrOperations     int64 `json:"wr_operations"`
		FlushOperations  int64 `json:"flush_operations"`
		RdTotalTimeNs    int64 `json:"rd_total_time_ns"`
		WrTotalTimeNs    int64 `json:"wr_total_time_ns"`
		FlushTotalTimeNs int64 `json:"flush_total_time_ns"`
	} `json:"stats"`
}

// BalloonInfo is query-balloon's reply: the guest's current memory in bytes.
type BalloonInfo struct {
	Actual int64 `json:"actual"`
}

// MigrationCapability turns a migration capability on or off.
type MigrationCapability struct {
	Capability string `json:"capability"` // e.g. postcopy-ram, auto-converge, events
	State      bool   `json:"state"`
}

// MigrationParameters are migrate-set-parameters' arguments; nil fields are
// left as they are.
type MigrationParameters struct {
	MaxBandwidth          *int64 `json:"max-bandwidth,omitempty"`  // bytes per second
	DowntimeLimit         *int64 `json:"downtime-limit,omitempty"` // milliseconds
	MaxPostcopyBandwidth  *int64 `json:"max-postcopy-bandwidth,omitempty"`
	CPUThrottleInitial    *int64 `json:"cpu-throttle-initial,omitempty"`
	CPUThrottleIncrement  *int64 `json:"cpu-throttle-increment,omitempty"`
	MultifdChannels       *int64 `json:"multifd-channels,omitempty"`
	AnnounceInitial       *int64 `json:"announce-initial,omitempty"`
	XbzrleCacheSize       *int64 `json:"xbzrle-cache-size,omitempty"`
	BlockIncremental      *bool  `json:"block-incremental,omitempty"`
	MaxCPUThrottle        *int64 `json:"max-cpu-throttle,omitempty"`
	ThrottleTriggerThresh *int64 `json:"throttle-trigger-threshold,omitempty"`
}

// MigrationStats are RAM transfer figures in query-migrate.
type MigrationStats struct {
	Transferred      int64   `json:"transferred"`
	Remaining        int64   `json:"remaining"`
	Total            int64   `json:"total"`
	Duplicate        int64   `json:"duplicate"`
	Normal           int64   `json:"normal"`
	NormalBytes      int64   `json:"normal-bytes"`
	DirtyPagesRate   int64   `json:"dirty-pages-rate"`
	MBps             float64 `json:"mbps"`
	DirtySyncCount   int64   `json:"dirty-sync-count"`
	PostcopyRequests int64   `json:"postcopy-requests"`
	PageSize         int64   `json:"page-size"`
}

// MigrationInfo is query-migrate's reply.
type MigrationInfo struct {
	// Status: none, setup, active, postcopy-active, completed, failed,
	// cancelling, cancelled, pre-switchover, device, wait-unplug.
	Status           string          `json:"status"`
	TotalTime        int64           `json:"total-time"` // ms
	ExpectedDowntime int64           `json:"expected-downtime"`
	Downtime         int64           `json:"downtime"`
	SetupTime        int64           `json:"setup-time"`
	RAM              *MigrationStats `json:"ram,omitempty"`
	CPUThrottle      int64           `json:"cpu-throttle-percentage"`
	ErrorDesc        string          `json:"error-desc"`
}

// AddFDInfo is add-fd's reply.
type AddFDInfo struct {
	FDSetID int `json:"fdset-id"`
	FD      int `json:"fd"`
}

// QueryStatus returns QEMU's run state.
func (m *Monitor) QueryStatus(ctx context.Context) (StatusInfo, error) {
	var s StatusInfo
	return s, m.Execute(ctx, "query-status", nil, &s)
}

// QueryVersion returns QEMU's version.
func (m *Monitor) QueryVersion(ctx context.Context) (VersionInfo, error) {
	var v VersionInfo
	return v, m.Execute(ctx, "query-version", nil, &v)
}

// QueryCommands lists the commands QEMU knows.
func (m *Monitor) QueryCommands(ctx context.Context) ([]CommandInfo, error) {
	var c []CommandInfo
	return c, m.Execute(ctx, "query-commands", nil, &c)
}

// Stop pauses the guest's CPUs (event STOP).
func (m *Monitor) Stop(ctx context.Context) error { return m.Execute(ctx, "stop", nil, nil) }

// Cont resumes the guest's CPUs (event RESUME).
func (m *Monitor) Cont(ctx context.Context) error { return m.Execute(ctx, "cont", nil, nil) }

// SystemPowerdown presses the ACPI power button (event POWERDOWN).
func (m *Monitor) SystemPowerdown(ctx context.Context) error {
	return m.Execute(ctx, "system_powerdown", nil, nil)
}

// SystemReset resets the machine (event RESET).
func (m *Monitor) SystemReset(ctx context.Context) error {
	return m.Execute(ctx, "system_reset", nil, nil)
}

// Quit ends QEMU. QEMU may close the socket before or after it replies; a
// connection ended by QEMU is therefore success too.
func (m *Monitor) Quit(ctx context.Context) error {
	err := m.Execute(ctx, "quit", nil, nil)
	var qe *Error
	if err != nil && errors.Is(err, ErrClosed) && !errors.As(err, &qe) {
		return nil
	}
	return err
}

// QueryCPUsFast lists the vCPUs and their host threads.
func (m *Monitor) QueryCPUsFast(ctx context.Context) ([]CPUInfoFast, error) {
	var c []CPUInfoFast
	return c, m.Execute(ctx, "query-cpus-fast", nil, &c)
}

// QueryBlockstats returns I/O counters per block device.
func (m *Monitor) QueryBlockstats(ctx context.Context) ([]BlockStats, error) {
	var b []BlockStats
	return b, m.Execute(ctx, "query-blockstats", nil, &b)
}

// QueryBalloon returns the balloon's view of the guest's memory.
func (m *Monitor) QueryBalloon(ctx context.Context) (BalloonInfo, error) {
	var b BalloonInfo
	return b, m.Execute(ctx, "query-balloon", nil, &b)
}

// Migrate starts an outgoing migration to uri (unix:PATH, tcp:HOST:PORT, fd:NAME).
func (m *Monitor) Migrate(ctx context.Context, uri string) error {
	return m.Execute(ctx, "migrate", map[string]any{"uri": uri}, nil)
}

// MigrateIncoming starts listening for an incoming migration (QEMU started
// with -incoming defer).
func (m *Monitor) MigrateIncoming(ctx context.Context, uri string) error {
	return m.Execute(ctx, "migrate-incoming", map[string]any{"uri": uri}, nil)
}

// MigrateCancel cancels the outgoing migration; the source keeps running.
func (m *Monitor) MigrateCancel(ctx context.Context) error {
	return m.Execute(ctx, "migrate_cancel", nil, nil)
}

// MigrateSetCapabilities sets migration capabilities.
func (m *Monitor) MigrateSetCapabilities(ctx context.Context, caps []MigrationCapability) error {
	return m.Execute(ctx, "migrate-set-capabilities", map[string]any{"capabilities": caps}, nil)
}

// MigrateSetParameters sets migration parameters.
func (m *Monitor) MigrateSetParameters(ctx context.Context, p MigrationParameters) error {
	return m.Execute(ctx, "migrate-set-parameters", p, nil)
}

// QueryMigrate returns the migration's state and figures.
func (m *Monitor) QueryMigrate(ctx context.Context) (MigrationInfo, error) {
	var i MigrationInfo
	return i, m.Execute(ctx, "query-migrate", nil, &i)
}

// MigrateStartPostcopy switches a running migration to post-copy.
func (m *Monitor) MigrateStartPostcopy(ctx context.Context) error {
	return m.Execute(ctx, "migrate-start-postcopy", nil, nil)
}

// GetFD passes f to QEMU under name (for -netdev tap,fd=NAME and migrate fd:NAME).
func (m *Monitor) GetFD(ctx context.Context, name string, f *os.File) error {
	return m.ExecuteWithFiles(ctx, "getfd", map[string]any{"fdname": name}, nil, f)
}

// CloseFD closes a descriptor passed with GetFD.
func (m *Monitor) CloseFD(ctx context.Context, name string) error {
	return m.Execute(ctx, "closefd", map[string]any{"fdname": name}, nil)
}

// AddFD passes f into an fd set (a new one if fdsetID is nil), for
// /dev/fdset/N paths.
func (m *Monitor) AddFD(ctx context.Context, fdsetID *int, opaque string, f *os.File) (AddFDInfo, error) {
	args := map[string]any{}
	if fdsetID != nil {
		args["fdset-id"] = *fdsetID
	}
	if opaque != "" {
		args["opaque"] = opaque
	}
	var info AddFDInfo
	return info, m.ExecuteWithFiles(ctx, "add-fd", args, &info, f)
}

// RemoveFD removes an fd set (or one fd of it, if fd is not nil).
func (m *Monitor) RemoveFD(ctx context.Context, fdsetID int, fd *int) error {
	args := map[string]any{"fdset-id": fdsetID}
	if fd != nil {
		args["fd"] = *fd
	}
	return m.Execute(ctx, "remove-fd", args, nil)
}

// DeviceAdd adds a device: driver and id plus its properties, as -device
// would take them.
func (m *Monitor) DeviceAdd(ctx context.Context, driver, id string, props map[string]any) error {
	args := map[string]any{}
	for k, v := range props {
		args[k] = v
	}
	args["driver"], args["id"] = driver, id
	return m.Execute(ctx, "device_add", args, nil)
}

// DeviceDel asks the guest to release a device and waits for QEMU's
// DEVICE_DELETED event for it (the guest must cooperate for PCI devices).
func (m *Monitor) DeviceDel(ctx context.Context, id string) error {
	_, err := m.ExecuteWait(ctx, "device_del", map[string]any{"id": id}, nil, Match("DEVICE_DELETED", "device", id))
	return err
}

// BlockdevAdd adds a block node; args are blockdev-add's (driver,
// node-name, file, …), as -blockdev would take them.
func (m *Monitor) BlockdevAdd(ctx context.Context, args map[string]any) error {
	return m.Execute(ctx, "blockdev-add", args, nil)
}

// BlockdevDel removes a block node.
func (m *Monitor) BlockdevDel(ctx context.Context, nodeName string) error {
	return m.Execute(ctx, "blockdev-del", map[string]any{"node-name": nodeName}, nil)
}

// NetdevAdd adds a network backend; args are netdev_add's (type, id, fd, …).
func (m *Monitor) NetdevAdd(ctx context.Context, args map[string]any) error {
	return m.Execute(ctx, "netdev_add", args, nil)
}

// NetdevDel removes a network backend.
func (m *Monitor) NetdevDel(ctx context.Context, id string) error {
	return m.Execute(ctx, "netdev_del", map[string]any{"id": id}, nil)
}

// SetLink sets the link of a NIC (the guest device's id, or its netdev's)
// up or down: the guest sees its carrier come and go. QEMU refuses an
// unknown name (a *Error, DeviceNotFound).
func (m *Monitor) SetLink(ctx context.Context, name string, up bool) error {
	if name == "" {
		return errors.New("qmp: set_link: no device name")
	}
	args := struct {
		Name string `json:"name"`
		Up   bool   `json:"up"`
	}{name, up}
	return m.Execute(ctx, "set_link", args, nil)
}

// KeyValue is one key of send-key; kemu sends QEMU qcodes ("ctrl", "alt",
// "delete", "a", "f1", …: QAPI's QKeyCode).
type KeyValue struct {
	Type string `json:"type"` // "qcode"
	Data string `json:"data"`
}

// CtrlAltDelete is the three-finger salute: a guest OS's request to reboot.
var CtrlAltDelete = []string{"ctrl", "alt", "delete"}

// SendKey presses the keys given as qcodes together, in order, on the
// guest's keyboard and releases them after hold (0: QEMU's 100 ms).
func (m *Monitor) SendKey(ctx context.Context, hold time.Duration, qcodes ...string) error {
	if len(qcodes) == 0 {
		return errors.New("qmp: send-key: no keys")
	}
	args := struct {
		Keys     []KeyValue `json:"keys"`
		HoldTime int64      `json:"hold-time,omitempty"`
	}{HoldTime: hold.Milliseconds()}
	for _, k := range qcodes {
		args.Keys = append(args.Keys, KeyValue{Type: "qcode", Data: k})
	}
	return m.Execute(ctx, "send-key", args, nil)
}

// HumanMonitorCommand runs an HMP command and returns its output.
func (m *Monitor) HumanMonitorCommand(ctx context.Context, cmdline string) (string, error) {
	var out string
	return out, m.Execute(ctx, "human-monitor-command", map[string]any{"command-line": cmdline}, &out)
}

// QueryQMPSchema returns the QAPI schema as raw JSON (large: ~207 KB on 7.2).
func (m *Monitor) QueryQMPSchema(ctx context.Context) (json.RawMessage, error) {
	var s json.RawMessage
	return s, m.Execute(ctx, "query-qmp-schema", nil, &s)
}
