package launcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kemu-dev/kemu/qmp"
)

// Agent returns a connection to the guest agent, connecting (and
// synchronising) if needed. AgentConnected follows the outcome.
func (l *Launcher) Agent(ctx context.Context) (*qmp.Agent, error) {
	l.mu.Lock()
	a := l.agent
	l.mu.Unlock()
	if a != nil {
		select {
		case <-a.Done():
		default:
			return a, nil
		}
	}
	a, err := qmp.DialAgent(ctx, l.paths.GuestAgent)
	l.state.handle(event{kind: evAgent, on: err == nil})
	if err != nil {
		return nil, fmt.Errorf("launcher: guest agent: %w", err)
	}
	l.mu.Lock()
	l.agent = a
	l.mu.Unlock()
	return a, nil
}

// GuestPing checks that the guest agent answers.
func (l *Launcher) GuestPing(ctx context.Context) error {
	a, err := l.Agent(ctx)
	if err == nil {
		err = a.Ping(ctx)
	}
	l.state.handle(event{kind: evAgent, on: err == nil})
	return err
}

// dropAgent forgets the guest agent connection: the next Agent call dials
// and resynchronises again, and the domain says it is not connected.
func (l *Launcher) dropAgent() {
	l.mu.Lock()
	a := l.agent
	l.agent = nil
	l.mu.Unlock()
	if a != nil {
		a.Close()
	}
	l.state.handle(event{kind: evAgent, on: false})
}

// errNoAgent: the guest agent is not connected.
var errNoAgent = errors.New("launcher: the guest agent is not connected")

// agentShutdownTimeout bounds a guest-shutdown through the agent (its
// synchronisation, and the wait for a refusal).
const agentShutdownTimeout = 5 * time.Second

// agentShutdown asks the guest through its agent, if it is connected.
func (l *Launcher) agentShutdown(ctx context.Context, mode qmp.ShutdownMode) error {
	l.mu.Lock()
	a := l.agent
	l.mu.Unlock()
	if a == nil || !l.Domain().AgentConnected {
		return errNoAgent
	}
	select {
	case <-a.Done():
		return errNoAgent
	default:
	}
	ctx, cancel := context.WithTimeout(ctx, agentShutdownTimeout)
	defer cancel()
	return a.Shutdown(ctx, mode)
}
