package launcher

import (
	"context"
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
)

// PowerMethod is how the guest was asked to power off or reboot.
type PowerMethod = rpc.PowerMethod

// Power methods.
const (
	MethodGuestAgent    = rpc.PowerMethod_GuestAgent      // guest-shutdown through the guest agent
	MethodACPI          = rpc.PowerMethod_ACPIPowerButton // QMP system_powerdown
	MethodCtrlAltDelete = rpc.PowerMethod_CtrlAltDelete   // QMP send-key
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
}

// Interface is one guest NIC on the pod network, for VMI status.interfaces.
type Interface struct {
	Name       string   // the VMI interface name
	MAC        string   // the guest's MAC
	IPs        []string // where the cluster reaches the VM (the pod IPs)
	GuestIP    string   // the address the guest leases, e.g. 10.0.2.2/24
	InfoSource string   // "domain"
	Queues     int
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

// maxHistory bounds the changes kept for watchers.
const maxHistory = 1024

// domainState holds the current Domain and its history for watchers.
type domainState struct {
	mu      sync.Mutex
	cur     Domain
	history []Domain
	first   int // Seq of history[0]
	changed chan struct{}
}

func newDomainState(accel string) *domainState {
	d := &domainState{changed: make(chan struct{})}
	d.set(func(x *Domain) { x.State, x.Reason, x.Accel = StateStarting, ReasonUnspecified, accel })
	return d
}

// set applies f to the current domain and records it if anything changed.
func (s *domainState) set(f func(*Domain)) Domain {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := s.cur
	f(&next)
	if s.cur.Seq > 0 && sameDomain(next, s.cur) {
		return s.cur
	}
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
		a.DeviceCgroup == b.DeviceCgroup && a.SELinuxContext == b.SELinuxContext &&
		reflect.DeepEqual(a.Interfaces, b.Interfaces)
}

func (s *domainState) get() Domain {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// Watcher follows domain changes from where it was created (or from the start).
type Watcher struct {
	s    *domainState
	next int // Seq of the next change to return
}

// Next returns the next change, waiting for it within ctx. If the watcher
// fell more than 1024 changes behind, it resumes at the oldest kept.
func (w *Watcher) Next(ctx context.Context) (Domain, error) {
	for {
		w.s.mu.Lock()
		if w.next < w.s.first {
			w.next = w.s.first
		}
		if i := w.next - w.s.first; i >= 0 && i < len(w.s.history) {
			d := w.s.history[i]
			w.next++
			w.s.mu.Unlock()
			return d, nil
		}
		ch := w.s.changed
		w.s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return Domain{}, ctx.Err()
		}
	}
}

// WaitFor waits until the domain satisfies f, checking the current state first.
func (w *Watcher) WaitFor(ctx context.Context, f func(Domain) bool) (Domain, error) {
	if d := w.s.get(); f(d) {
		return d, nil
	}
	for {
		d, err := w.Next(ctx)
		if err != nil || f(d) {
			return d, err
		}
	}
}

// InState selects domains in any of the states.
func InState(states ...State) func(Domain) bool {
	return func(d Domain) bool {
		for _, s := range states {
			if d.State == s {
				return true
			}
		}
		return false
	}
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
