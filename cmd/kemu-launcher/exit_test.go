package main

import (
	"os"
	"syscall"
	"testing"

	"github.com/kemu-dev/kemu/launcher"
	"github.com/kemu-dev/kemu/launcher/signals"
)

// A guest powered off because of a signal alone is the host's stop (exit
// 3: the Pod fails as its VMI does); with the node agent's Shutdown or Kill
// RPC (a deletion), or without any signal, the stop loop's status stands.
func TestExitStatus(t *testing.T) {
	off := func(sig string) launcher.Domain {
		return launcher.Domain{State: launcher.StateShutoff, Reason: launcher.ReasonGuestShutdown, StopSignal: sig}
	}
	for _, tt := range []struct {
		name      string
		r         signals.Result
		requested bool
		want      int
	}{
		{"the guest powered off by itself", signals.Result{Domain: off(""), Exit: signals.ExitPoweredOff}, false, signals.ExitPoweredOff},
		{"SIGTERM alone (liveness, eviction)", signals.Result{Domain: off("SIGTERM"), Stopped: true, Exit: signals.ExitPoweredOff}, false, signals.ExitStopped},
		{"SIGTERM and the Shutdown RPC (deletion)", signals.Result{Domain: off("SIGTERM"), Stopped: true, Exit: signals.ExitPoweredOff}, true, signals.ExitPoweredOff},
		{"the Shutdown RPC alone", signals.Result{Domain: off(""), Exit: signals.ExitPoweredOff}, true, signals.ExitPoweredOff},
		{"SIGTERM, grace over", signals.Result{Domain: launcher.Domain{State: launcher.StateShutoff, Reason: launcher.ReasonHostRequest, StopSignal: "SIGTERM"},
			Stopped: true, Exit: signals.ExitStopped}, false, signals.ExitStopped},
		{"SIGTERM, then a crash", signals.Result{Domain: launcher.Domain{State: launcher.StateShutoff, Reason: launcher.ReasonCrashed, StopSignal: "SIGTERM"},
			Stopped: true, Exit: signals.ExitFailed}, false, signals.ExitFailed},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := exitStatus(tt.r, tt.requested); got != tt.want {
				t.Errorf("exitStatus = %d, want %d", got, tt.want)
			}
		})
	}
	for sig, want := range map[os.Signal]string{syscall.SIGTERM: "SIGTERM", os.Interrupt: "SIGINT", syscall.SIGHUP: "hangup"} {
		if got := signalName(sig); got != want {
			t.Errorf("signalName(%v) = %q, want %q", sig, got, want)
		}
	}
}
