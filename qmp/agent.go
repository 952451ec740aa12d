package qmp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// Agent is a connection to the QEMU guest agent (qemu-ga) through the
// virtio-serial chardev socket. The agent speaks QMP's framing without a
// greeting or events; an earlier client may have left replies in the pipe,
// so the connection is resynchronised with guest-sync-delimited first and
// after any command that timed out. Commands run one at a time, as qemu-ga
// runs them.
type Agent struct {
	k *conn

	mu       sync.Mutex // one command at a time
	needSync bool
}

// NewAgent wraps an open connection to a guest agent socket. Lines over
// MaxAgentLineSize end it (see AgentLinesDropped).
func NewAgent(c net.Conn) *Agent {
	a := &Agent{k: newConn(c, true, MaxAgentLineSize), needSync: true}
	a.k.start()
	return a
}

// DialAgent connects to the guest agent socket at path and synchronises
// within ctx (the agent must be running in the guest to answer).
func DialAgent(ctx context.Context, path string) (*Agent, error) {
	c, err := dialUnix(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("qmp: connecting to the guest agent at %s: %w", path, err)
	}
	a := NewAgent(c)
	a.mu.Lock()
	err = a.sync(ctx)
	a.mu.Unlock()
	if err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

// Close ends the connection.
func (a *Agent) Close() error { return a.k.close() }

// Done is closed when the connection ends.
func (a *Agent) Done() <-chan struct{} { return a.k.done }

// Sync resynchronises the stream: stale replies before its own are dropped.
func (a *Agent) Sync(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sync(ctx)
}

func (a *Agent) sync(ctx context.Context) error {
	token := rand.Int64N(1 << 40)
	id := a.k.nextID()
	b, err := json.Marshal(request{Execute: "guest-sync-delimited", Arguments: map[string]any{"id": token}, ID: id})
	if err != nil {
		return err
	}
	// A leading 0xFF makes qemu-ga drop whatever half-written command an
	// earlier client left in its parser; its complaint about that has no id
	// and is not our token, so it is skipped.
	var got int64
	_, err = a.k.roundTrip(ctx, "guest-sync-delimited", id, append(append([]byte{0xff}, b...), '\n'), nil, func(msg *message) bool {
		return json.Unmarshal(msg.Return, &got) == nil && got == token
	})
	if err != nil {
		return err
	}
	a.needSync = false
	return nil
}

// Execute runs an agent command and decodes its return value into reply.
func (a *Agent) Execute(ctx context.Context, cmd string, args, reply any) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.needSync {
		if err := a.sync(ctx); err != nil {
			return err
		}
	}
	msg, err := a.k.call(ctx, cmd, args, nil, nil)
	if err != nil {
		if ctx.Err() != nil {
			a.needSync = true // its reply may still come
		}
		return err
	}
	if reply != nil && len(msg.Return) > 0 {
		if err := json.Unmarshal(msg.Return, reply); err != nil {
			return fmt.Errorf("qmp: %s: decoding the reply: %w", cmd, err)
		}
	}
	return nil
}

// AgentInfo is guest-info's reply.
type AgentInfo struct {
	Version           string `json:"version"`
	SupportedCommands []struct {
		Name            string `json:"name"`
		Enabled         bool   `json:"enabled"`
		SuccessResponse bool   `json:"success-response"`
	} `json:"supported_commands"`
}

// OSInfo is guest-get-osinfo's reply.
type OSInfo struct {
	KernelRelease string `json:"kernel-release"`
	KernelVersion string `json:"kernel-version"`
	Machine       string `json:"machine"`
	ID            string `json:"id"`
	Name          string `json:"name"`
	PrettyName    string `json:"pretty-name"`
	Version       string `json:"version"`
	VersionID     string `json:"version-id"`
}

// GuestIPAddress is one address of a guest interface.
type GuestIPAddress struct {
	Type    string `json:"ip-address-type"` // ipv4, ipv6
	Address string `json:"ip-address"`
	Prefix  int    `json:"prefix"`
}

// GuestNetworkInterface is one entry of guest-network-get-interfaces.
type GuestNetworkInterface struct {
	Name            string           `json:"name"`
	HardwareAddress string           `json:"hardware-address"`
	IPAddresses     []GuestIPAddress `json:"ip-addresses"`
}

// ExecStatus is guest-exec-status's reply; output is decoded from base64.
type ExecStatus struct {
	Exited       bool   `json:"exited"`
	ExitCode     int    `json:"exitcode"`
	Signal       int    `json:"signal"`
	OutData      string `json:"out-data"`
	ErrData      string `json:"err-data"`
	OutTruncated bool   `json:"out-truncated"`
	ErrTruncated bool   `json:"err-truncated"`
	Stdout       []byte `json:"-"`
	Stderr       []byte `json:"-"`
}

// Ping checks that the agent answers.
func (a *Agent) Ping(ctx context.Context) error { return a.Execute(ctx, "guest-ping", nil, nil) }

// Info returns the agent's version and commands.
func (a *Agent) Info(ctx context.Context) (AgentInfo, error) {
	var i AgentInfo
	return i, a.Execute(ctx, "guest-info", nil, &i)
}

// OSInfo returns the guest's OS as the agent sees it.
func (a *Agent) OSInfo(ctx context.Context) (OSInfo, error) {
	var o OSInfo
	return o, a.Execute(ctx, "guest-get-osinfo", nil, &o)
}

// NetworkInterfaces returns the guest's interfaces and addresses.
func (a *Agent) NetworkInterfaces(ctx context.Context) ([]GuestNetworkInterface, error) {
	var n []GuestNetworkInterface
	return n, a.Execute(ctx, "guest-network-get-interfaces", nil, &n)
}

// ShutdownMode is guest-shutdown's mode.
type ShutdownMode string

// guest-shutdown modes.
const (
	ShutdownPowerdown ShutdownMode = "powerdown"
	ShutdownReboot    ShutdownMode = "reboot"
	ShutdownHalt      ShutdownMode = "halt"
)

// Shutdown asks the guest OS to power off, reboot or halt (guest-shutdown).
// qemu-ga answers guest-shutdown only when it fails, so Shutdown first
// synchronises (the agent is alive and the stream clean), then sends it
// followed by guest-sync-delimited: the agent runs commands in order, so
// the sync's answer means the shutdown was accepted, and an error reply
// before it is returned. A guest that goes down before answering the sync
// (the connection ends, or ctx ends) has accepted it too: ctx bounds that
// wait, so give it a short one.
func (a *Agent) Shutdown(ctx context.Context, mode ShutdownMode) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.sync(ctx); err != nil {
		return err
	}
	reply, forget, err := a.k.post(ctx, "guest-shutdown", map[string]any{"mode": string(mode)})
	if err != nil {
		return err
	}
	defer forget()
	// Until the sync below answered, a late reply may still be in the pipe.
	a.needSync = true
	synced := make(chan error, 1)
	go func() { synced <- a.sync(ctx) }()
	var refused error
	select {
	case msg := <-reply:
		if msg.Error != nil {
			e := *msg.Error
			e.Command = "guest-shutdown"
			refused = &e
		}
		<-synced
	case <-synced:
		// Answered (accepted), or the guest went down first: accepted too.
		select {
		case msg := <-reply: // the error and the sync's answer came together
			if msg.Error != nil {
				e := *msg.Error
				e.Command = "guest-shutdown"
				refused = &e
			}
		default:
		}
	}
	return refused
}

// Exec starts path with args in the guest and returns its pid. With
// capture, ExecStatus returns its output.
func (a *Agent) Exec(ctx context.Context, path string, args []string, input []byte, capture bool) (int, error) {
	req := map[string]any{"path": path, "capture-output": capture}
	if len(args) > 0 {
		req["arg"] = args
	}
	if input != nil {
		req["input-data"] = base64.StdEncoding.EncodeToString(input)
	}
	var r struct {
		PID int `json:"pid"`
	}
	return r.PID, a.Execute(ctx, "guest-exec", req, &r)
}

// Run starts path with args in the guest, output captured, and polls
// its status until it exits or ctx ends.
func (a *Agent) Run(ctx context.Context, path string, args []string, input []byte) (ExecStatus, error) {
	pid, err := a.Exec(ctx, path, args, input, true)
	if err != nil {
		return ExecStatus{}, err
	}
	wait := 10 * time.Millisecond
	for {
		st, err := a.ExecStatus(ctx, pid)
		if err != nil || st.Exited {
			return st, err
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("qmp: guest-exec %s (pid %d) still running: %w", path, pid, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}

// ExecStatus returns the state of a process started by Exec.
func (a *Agent) ExecStatus(ctx context.Context, pid int) (ExecStatus, error) {
	var s ExecStatus
	if err := a.Execute(ctx, "guest-exec-status", map[string]any{"pid": pid}, &s); err != nil {
		return s, err
	}
	var err error
	if s.Stdout, err = base64.StdEncoding.DecodeString(s.OutData); err != nil {
		return s, fmt.Errorf("qmp: guest-exec-status: out-data: %w", err)
	}
	if s.Stderr, err = base64.StdEncoding.DecodeString(s.ErrData); err != nil {
		return s, fmt.Errorf("qmp: guest-exec-status: err-data: %w", err)
	}
	return s, nil
}
