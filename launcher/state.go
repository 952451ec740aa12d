package launcher

import (
	"reflect"
	"sync"
	"time"

	"github.com/kemu-dev/kemu/launcher/rpc"
)

// State is the domain's life as the launcher sees it: the command API's
// enum (launcher/rpc), so the names are defined once for every process.
type State = rpc.DomainState

// Domain states.
const (
	StateUnspecified  = rpc.DomainState_DOMAIN_STATE_UNSPECIFIED // never a launcher's own state
	StateStarting     = rpc.DomainState_Starting
	StateRunning      = rpc.DomainState_Running
	StatePaused       = rpc.DomainState_Paused
	StateShuttingDown = rpc.DomainState_ShuttingDown
	StateShutoff      = rpc.DomainState_Shutoff
	StateMigrating    = rpc.DomainState_Migrating
)

// Reason says why the domain is in its state (launcher/rpc's enum).
type Reason = rpc.DomainReason

// Reasons.
const (
	ReasonUnspecified   = rpc.DomainReason_DOMAIN_REASON_UNSPECIFIED // none (yet)
	ReasonBooted        = rpc.DomainReason_Booted
	ReasonUnpaused      = rpc.DomainReason_Unpaused
	ReasonStartPaused   = rpc.DomainReason_StartStrategyPaused
	ReasonUser          = rpc.DomainReason_User          // paused by a request
	ReasonIOError       = rpc.DomainReason_IOError       // paused by QEMU on a disk error
	ReasonMigration     = rpc.DomainReason_Migration     // paused for or by migration
	ReasonACPI          = rpc.DomainReason_ACPIPowerdown // power button pressed
	ReasonGuestShutdown = rpc.DomainReason_GuestShutdown // the guest powered off
	ReasonHostRequest   = rpc.DomainReason_HostRequest   // quit or kill by the launcher
	ReasonCrashed       = rpc.DomainReason_Crashed       // QEMU ended on its own, not by a guest power-off
	ReasonFailedToStart = rpc.DomainReason_FailedToStart
	ReasonGuestPanicked = rpc.DomainReason_GuestPanicked
	ReasonGuestReset    = rpc.DomainReason_GuestReset
	ReasonUnknownPause  = rpc.DomainReason_Unknown
	// ReasonMigrated: Running on the target after an incoming migration,
	// Shutoff on the source after FinalizeMigration.
	ReasonMigrated          = rpc.DomainReason_Migrated
	ReasonMigrationFailed   = rpc.DomainReason_MigrationFailed
	ReasonMigrationCanceled = rpc.DomainReason_MigrationCanceled
)

// RebootMethod is how the guest was asked to reboot itself (SoftReboot).
type RebootMethod = rpc.RebootMethod

// Reboot methods.
const (
	MethodGuestAgent    = rpc.RebootMethod_GuestAgent    // guest-shutdown mode=reboot through the guest agent
	MethodCtrlAltDelete = rpc.RebootMethod_CtrlAltDelete // QMP send-key
)

// Domain is a snapshot of the domain's state.
type Domain struct {
	State   State
	Reason  Reason
	Message string
	Since   time.Time
	// Seq counts changes, from 1.
	Seq int
	// ExitCode is QEMU's exit status once it ended (-1 if killed by a signal).
	ExitCode *int
	// Accel is kvm or tcg.
	Accel string
	// PID is QEMU's process id while it runs.
	PID int
	// AgentConnected says whether the guest agent answers.
	AgentConnected bool
	// DeviceCgroup is QEMU's device cgroup, "" when it runs without the
	// device allowlist (Config.NoDeviceCgroup).
	DeviceCgroup string
	// SELinuxContext is QEMU's SELinux process label, "" when SELinux is
	// disabled.
	SELinuxContext string
	// Interfaces are the guest's NICs wired on the pod network.
	Interfaces []Interface
	// Migration is the last migration's progress or outcome (nil: none).
	Migration *Migration
	// StopSignal names the signal (SIGTERM, SIGINT) that made the launcher
	// shut the VM down (Signaled), "" when none came: the kubelet stopping
	// the compute container, which the node agent tells from a stop asked
	// through the API (a VMI or Pod deletion) by what it is deleting.
	StopSignal string
}

// Interface is one guest NIC on the pod network, for VMI status.interfaces.
type Interface struct {
	Name       string   // the VMI interface name
	MAC        string   // the guest's MAC
	IPs        []string // where the cluster reaches the VM (the pod IPs)
	GuestIP    string   // the address the guest leases, e.g. 10.0.2.2/24
	InfoSource string   // "domain"
	Queues     int
	LinkDown   bool // the NIC's link is down (QMP set_link; link.go)
}

func (d Domain) String() string {
	s := d.State.String()
	if d.Reason != ReasonUnspecified {
		s += " (" + d.Reason.String() + ")"
	}
	if d.Message != "" {
		s += ": " + d.Message
	}
	if d.AgentConnected {
		s += " [guest agent connected]"
	}
	return s
}

// event is one input of the state machine: a lifecycle step of the
// launcher, a QMP event (or QEMU's run state read after one), a guest agent
// outcome, or QEMU's exit. Only the fields its kind names are read.
type event struct {
	kind eventKind

	accel      string      // evAccel
	interfaces []Interface // evNetwork
	// evExec
	pid            int
	deviceCgroup   string
	selinuxContext string
	// evStatus: QEMU's run state (query-status)
	status  string
	running bool
	// evShutdown: guest initiated; evShutdown, evPanicked, evStartFailed,
	// evExited: the message
	guest   bool
	message string
	// evAgent, evPauseAsked: the new value
	on bool
	// evExited: QEMU's exit status (-1: killed by a signal or unknown) and
	// its last output, added to the message of a crash
	code   int
	detail string
	// evMigrationProgress, evMigrationCompleted: the figures (copied; the
	// final ones with the status completed); evMigrationAborted: QEMU's
	// run state after it (running), why (reason) and the message
	migration *Migration
	reason    Reason
}

type eventKind int

const (
	evAccel         eventKind = iota + 1 // the accelerator is chosen
	evNetwork                            // the pod network is wired
	evLink                               // a NIC's link was set up or down (message: its name, on: up)
	evExec                               // QEMU runs (pid, cgroup, SELinux label)
	evStartFailed                        // a start step failed
	evBooted                             // the launcher resumed the guest (cont)
	evStartPaused                        // left paused: startStrategy Paused
	evIncoming                           // started waiting for an incoming migration
	evResume                             // QMP RESUME
	evStatus                             // QEMU's run state after STOP or lost events
	evPowerdown                          // QMP POWERDOWN (the ACPI button)
	evShutdown                           // QMP SHUTDOWN
	evPanicked                           // QMP GUEST_PANICKED
	evWatchdog                           // QMP WATCHDOG: the guest's watchdog fired (message: QEMU's action)
	evAgent                              // the guest agent answers (on) or not
	evPauseAsked                         // a pause was asked (on) or an unpause
	evHostRequested                      // the launcher asked QEMU to quit or killed it
	evStopSignal                         // a stop signal came while the VM ran (message: its name)
	evExited                             // QEMU exited
	// Migration (migration_source.go, migration_target.go).
	evMigrationStarted   // the source started migrating
	evMigrationProgress  // new figures of the migration
	evMigrationAborted   // the source's migration failed or was canceled; it keeps the guest
	evMigrationCompleted // the source sent everything; it waits paused for FinalizeMigration
	evMigrationFinal     // FinalizeMigration: the source ends because the target runs
	evIncomingFailed     // the target's incoming migration failed
)

// memory is what the state machine keeps besides the Domain: why QEMU may
// end, and whether a pause was asked for.
type memory struct {
	guestShutdown bool // SHUTDOWN with guest=true seen
	hostRequested bool // quit or kill sent by the launcher
	pauseAsked    bool
	inFailed      bool   // the incoming migration failed (target)
	migrating     bool   // an outgoing migration owns the run state (source)
	migrated      bool   // the target runs: the source ends (FinalizeMigration)
	watchdog      string // the action of the last WATCHDOG event ("" = none)
}

// transition is the state machine: the next Domain (and memory) after ev.
// It is pure; domainState.handle is its only caller and the only writer of
// the launcher's domain.
func transition(d Domain, m memory, ev event) (Domain, memory) {
	switch ev.kind {
	case evAccel:
		d.Accel = ev.accel
	case evNetwork:
		d.Interfaces = ev.interfaces
	case evLink:
		d.Interfaces = withLink(d.Interfaces, ev.message, !ev.on)
	case evExec:
		d.PID, d.DeviceCgroup, d.SELinuxContext = ev.pid, ev.deviceCgroup, ev.selinuxContext
	case evStartFailed:
		d.State, d.Reason, d.Message = StateShutoff, ReasonFailedToStart, ev.message
	case evBooted:
		d.State, d.Reason = StateRunning, ReasonBooted
	case evStartPaused:
		d.State, d.Reason = StatePaused, ReasonStartPaused
	case evIncoming:
		d.State, d.Reason, d.Message = StatePaused, ReasonMigration, "waiting for an incoming migration"
	case evResume:
		switch {
		case m.migrating: // the source's run state is the migration's (evMigrationAborted)
		case waitingIncoming(d):
			d.State, d.Reason, d.Message = StateRunning, ReasonMigrated, ""
		default:
			d = resumed(d)
		}
	case evMigrationStarted:
		m.migrating = true
		d.State, d.Reason, d.Message = StateMigrating, ReasonMigration, ""
	case evMigrationProgress:
		d.Migration = ev.migration
	case evMigrationAborted:
		m.migrating = false
		d.Reason, d.Message = ev.reason, ev.message
		d.State = StatePaused
		if ev.running {
			d.State = StateRunning
		}
	case evMigrationCompleted:
		d.Message = "migrated: waiting for the target to run"
		if ev.migration != nil {
			d.Migration = ev.migration
		}
	case evMigrationFinal:
		m.migrated = true
	case evIncomingFailed:
		m.inFailed = true
		d.Message = ev.message
	case evStatus:
		if m.migrating {
			break // paused for the switchover, or after it: still Migrating
		}
		if d.State == StateShuttingDown || d.State == StateShutoff {
			break
		}
		switch {
		case ev.running:
			d.State, d.Reason = StateRunning, ReasonUnpaused
		case ev.status == "shutdown":
			d.State = StateShuttingDown
		default:
			d.State, d.Reason, d.Message = StatePaused, pauseReason(ev.status, m.pauseAsked), ""
		}
	case evPowerdown:
		d.State, d.Reason = StateShuttingDown, ReasonACPI
	case evShutdown:
		reason := ReasonHostRequest
		if ev.guest {
			m.guestShutdown = true
			reason = ReasonGuestShutdown
		}
		d.State, d.Reason, d.Message = StateShuttingDown, reason, ev.message
		if m.watchdog != "" {
			d.Message = WatchdogMessage(m.watchdog)
		}
	case evWatchdog:
		m.watchdog = ev.message
		d.Message = WatchdogMessage(ev.message)
	case evPanicked:
		d.Reason, d.Message = ReasonGuestPanicked, ev.message
	case evAgent:
		d.AgentConnected = ev.on
	case evPauseAsked:
		m.pauseAsked = ev.on
	case evHostRequested:
		m.hostRequested = true
	case evStopSignal:
		if d.StopSignal == "" && d.State != StateShutoff {
			d.StopSignal = ev.message // the first one: a second only kills
		}
	case evExited:
		code := ev.code
		incoming := waitingIncoming(d)
		d.State, d.Reason, d.Message = StateShutoff, exitReason(m.guestShutdown, m.hostRequested, code), ev.message
		switch {
		case m.migrated:
			d.Reason = ReasonMigrated
		case m.inFailed || (incoming && !m.hostRequested):
			// A failed incoming migration ends QEMU (7.2 exits by itself).
			d.Reason = ReasonMigrationFailed
		}
		switch {
		case m.watchdog == qemuWatchdogPoweroff && !m.hostRequested && !m.migrated:
			// The guest hung and its watchdog powered the VM off (QEMU 7.2
			// exits 0 without SHUTDOWN): a failure, as libvirt's crashed.
			d.Reason, d.Message = ReasonCrashed, WatchdogMessage(m.watchdog)+" ("+ev.message+")"
		case m.watchdog != "" && d.Reason == ReasonGuestShutdown:
			d.Message = WatchdogMessage(m.watchdog) // the guest shut down on the watchdog's ACPI request
		}
		if d.Reason == ReasonCrashed && ev.detail != "" {
			d.Message += ": " + ev.detail
		}
		d.ExitCode, d.PID, d.AgentConnected = &code, 0, false
	}
	return d, m
}

// waitingIncoming says whether d is a migration target's, still paused
// for its incoming migration (only a target is Paused for Migration: a
// source is Migrating).
func waitingIncoming(d Domain) bool { return d.State == StatePaused && d.Reason == ReasonMigration }

// resumed is the domain after QMP RESUME outside a migration.
func resumed(d Domain) Domain {
	switch d.State {
	case StateStarting:
		d.State, d.Reason = StateRunning, ReasonBooted
	case StatePaused, StateMigrating:
		d.State, d.Reason, d.Message = StateRunning, ReasonUnpaused, ""
	}
	return d
}

// maxHistory bounds the changes kept for watchers.
const maxHistory = 1024

// domainState is the state machine's instance: the current Domain, its
// memory and the history for watchers. handle is its only writer.
type domainState struct {
	mu      sync.Mutex
	cur     Domain
	mem     memory
	history []Domain
	first   int // Seq of history[0]
	changed chan struct{}
}

func newDomainState(accel string) *domainState {
	s := &domainState{changed: make(chan struct{})}
	s.record(Domain{State: StateStarting, Accel: accel})
	return s
}

// handle feeds ev to the state machine and records the new Domain if
// anything changed.
func (s *domainState) handle(ev event) Domain {
	s.mu.Lock()
	defer s.mu.Unlock()
	next, mem := transition(s.cur, s.mem, ev)
	s.mem = mem
	if sameDomain(next, s.cur) {
		return s.cur
	}
	return s.record(next)
}

// record appends next as the next change; s.mu is held (or s is new).
func (s *domainState) record(next Domain) Domain {
	next.Seq = s.cur.Seq + 1
	next.Since = time.Now()
	s.cur = next
	if len(s.history) == 0 {
		s.first = next.Seq
	}
	s.history = append(s.history, next)
	if len(s.history) > maxHistory {
		s.history = s.history[1:]
		s.first++
	}
	close(s.changed)
	s.changed = make(chan struct{})
	return next
}

func sameDomain(a, b Domain) bool {
	return a.State == b.State && a.Reason == b.Reason && a.Message == b.Message && a.Accel == b.Accel &&
		a.AgentConnected == b.AgentConnected && a.PID == b.PID &&
		(a.ExitCode == nil) == (b.ExitCode == nil) &&
		a.DeviceCgroup == b.DeviceCgroup && a.SELinuxContext == b.SELinuxContext && a.StopSignal == b.StopSignal &&
		reflect.DeepEqual(a.Interfaces, b.Interfaces) && reflect.DeepEqual(a.Migration, b.Migration)
}

func (s *domainState) get() Domain {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// pauseReason maps QEMU's run state after a STOP event to why it paused.
func pauseReason(qemuStatus string, requested bool) Reason {
	switch qemuStatus {
	case "io-error":
		return ReasonIOError
	case "inmigrate", "postmigrate", "finish-migrate", "prelaunch":
		if qemuStatus == "prelaunch" {
			return ReasonStartPaused
		}
		return ReasonMigration
	case "guest-panicked":
		return ReasonGuestPanicked
	}
	if requested {
		return ReasonUser
	}
	return ReasonUnknownPause
}

// exitReason decides why QEMU ended.
func exitReason(guestShutdown, hostRequested bool, code int) Reason {
	switch {
	case guestShutdown && code == 0:
		return ReasonGuestShutdown
	case hostRequested:
		return ReasonHostRequest
	default:
		return ReasonCrashed
	}
}

// WatchdogMessage is the domain's message after the guest's watchdog fired
// with QEMU's action (reset, poweroff, shutdown): it stays on the domain
// (a reset guest runs on; a powered-off one ends with it).
func WatchdogMessage(action string) string { return "watchdog fired: " + action }

// qemuWatchdogPoweroff is QEMU's WATCHDOG action that ends QEMU at once.
const qemuWatchdogPoweroff = "poweroff"
