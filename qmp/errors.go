package qmp

import (
	"errors"
	"fmt"
)

// ErrClosed is returned (wrapped with the reason) by calls on a monitor or
// agent connection that has ended.
var ErrClosed = errors.New("qmp: connection closed")

// Error is an error reply from QEMU or the guest agent.
type Error struct {
	// Command is what was executed.
	Command string
	// Class is QEMU's error class, e.g. GenericError, CommandNotFound.
	Class string `json:"class"`
	// Desc is QEMU's description.
	Desc string `json:"desc"`
}

func (e *Error) Error() string {
	return fmt.Sprintf("qmp: %s: %s (%s)", e.Command, e.Desc, e.Class)
}

// IsCommandNotFound says whether err is QEMU's answer to an unknown command.
func IsCommandNotFound(err error) bool {
	var qe *Error
	return errors.As(err, &qe) && qe.Class == "CommandNotFound"
}

// EventsLostError tells a subscription that its buffer overflowed and the
// oldest Count events were dropped. The subscription goes on.
type EventsLostError struct {
	Count uint64
}

func (e *EventsLostError) Error() string {
	return fmt.Sprintf("qmp: subscription fell behind and lost %d events", e.Count)
}

// ProtocolError is what ends a connection when the peer sends something
// that is not QMP.
type ProtocolError struct {
	// Line is the start of what was received.
	Line string
	Err  error
}

func (e *ProtocolError) Error() string {
	return fmt.Sprintf("qmp: not a QMP message (%v): %q", e.Err, e.Line)
}

func (e *ProtocolError) Unwrap() error { return e.Err }

// closedError wraps the reason a connection ended so that it matches
// ErrClosed with errors.Is and still says why.
type closedError struct{ cause error }

func (e *closedError) Error() string {
	if e.cause == nil {
		return ErrClosed.Error()
	}
	return ErrClosed.Error() + ": " + e.cause.Error()
}

func (e *closedError) Is(target error) bool { return target == ErrClosed }

func (e *closedError) Unwrap() error { return e.cause }
