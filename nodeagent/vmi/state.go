package vmi

import (
	"context"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kemu-dev/kemu/launcher/rpc"
	"github.com/kemu-dev/kemu/nodeagent/launcherclient"
)

// launcherState is what the node agent holds about one launcher Pod in
// memory (the entry of launchers.go). A restarted node agent rebuilds it
// from the launcher.
type launcherState struct {
	// The launcher Pod: its UID (the entry's key; the sockets volume's path
	// derives from it) and its name ("" while only status.activePods knows
	// it).
	podUID  types.UID
	podName string
	// The VMI it belongs to: its key (the work queue's) and UID.
	key    string
	vmiUID types.UID
	// role is the Pod's role for its VMI, decided on each sync
	// (launcherRoles); only the sync of the VMI's key reads or writes it.
	role Role

	// Set once connected; never changed after.
	ctx    context.Context
	cancel context.CancelFunc
	client *launcherclient.Client
	info   *rpc.InfoResponse

	mu        sync.Mutex
	domain    *rpc.Domain
	gone      string
	syncing   bool
	syncedGen int64 // metadata.generation last synced (0: none)
	synced    bool
	syncErr   string
	guest     *rpc.GuestInfoResponse
	guestAt   time.Time
	probing   bool      // a GuestPing is under way
	probedAt  time.Time // when the last GuestPing ended
	shutdown  bool      // Shutdown (then Kill) started
	rebooted  string    // the kemu.dev/soft-reboot value acted on

	// refusal is the last refusal of what was at the launcher socket; nil
	// before any and once the Pod's launcher verified.
	refusal *launcherclient.UnverifiedError
	// mig is the migration this launcher takes part in (migration_run.go).
	mig migrationRun

	// lost is set when a reconnection of the established client found the
	// socket no longer verifying (Follow's ErrUnverified): the state is
	// then replaced by a fresh one.
	lost *launcherclient.UnverifiedError
}

// startingVM says the launcher's first Sync, which starts the VM, is in
// flight.
func (s *launcherState) startingVM() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.syncing && s.syncedGen == 0
}

// setRefusal records a refusal; it says whether it differs from the last
// one (a new event is due).
func (s *launcherState) setRefusal(u *launcherclient.UnverifiedError) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := s.refusal == nil || *s.refusal != *u
	s.refusal = u
	return changed
}

// clearRefusal forgets the refusal; it says whether there was one.
func (s *launcherState) clearRefusal() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	had := s.refusal != nil
	s.refusal = nil
	return had
}

func (s *launcherState) getRefusal() *launcherclient.UnverifiedError {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refusal
}

func (s *launcherState) setLost(u *launcherclient.UnverifiedError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lost = u
}

func (s *launcherState) getLost() *launcherclient.UnverifiedError {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost
}

// setDomain keeps the newest domain (RPC answers may be older than the
// stream).
func (s *launcherState) setDomain(d *rpc.Domain) {
	if d == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.domain == nil || d.GetSeq() >= s.domain.GetSeq() {
		s.domain = d
	}
}

func (s *launcherState) getDomain() *rpc.Domain {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.domain
}

// setGone records that the launcher vanished, unless it reported its end.
func (s *launcherState) setGone(msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.domain != nil && s.domain.GetState() == stateShutoff {
		return
	}
	if s.gone == "" {
		s.gone = msg
	}
}

func (s *launcherState) isGone() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gone != ""
}

func (s *launcherState) observation(now time.Time) Observation {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := Observation{Domain: s.domain, Guest: s.guest, Synced: s.synced, SyncError: s.syncErr, Gone: s.gone,
		Now: metav1.NewTime(now)}
	if s.info != nil {
		o.LauncherVersion = s.info.GetLauncherVersion()
	}
	return o
}

// close ends the goroutines, the connection and the entry's side of a
// migration (the VM keeps running).
func (s *launcherState) close() {
	s.endMigration()
	if s.cancel != nil {
		s.cancel()
	}
	if s.client != nil {
		_ = s.client.Close()
		launcherConnections.Dec()
	}
}
