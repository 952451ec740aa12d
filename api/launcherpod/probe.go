package launcherpod

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"
)

// The exec and guestAgentPing probes of a VMI become exec probes of the
// compute container running kemu-launcher's probe subcommand (KubeVirt's
// virt-probe): it dials the launcher's Socket in SocketsDir and asks the
// launcher, which asks the guest agent.
const (
	// LauncherBinary is kemu-launcher in the launcher image ($PATH).
	LauncherBinary = "kemu-launcher"
	// ProbeSubcommand is kemu-launcher's first argument for a probe.
	ProbeSubcommand = "probe"
	// ProbeTimeoutPadding is added to the probe's timeoutSeconds for the
	// Pod's exec probe: the subcommand gives up on the guest after
	// timeoutSeconds and still has time to say so (KubeVirt adds 1 s too).
	ProbeTimeoutPadding int32 = 1

	flagProbeSocketsDir    = "sockets-dir"
	flagProbeTimeout       = "timeout-seconds"
	flagProbeGuestAgentPin = "guest-agent-ping"
)

// Probe is what one run of the probe subcommand checks: a guest-ping
// (GuestAgentPing) or Command run in the guest, within Timeout.
type Probe struct {
	// SocketsDir holds the launcher's Socket.
	SocketsDir string
	// Timeout of the check (the VMI probe's timeoutSeconds).
	Timeout time.Duration
	// GuestAgentPing: guest-ping; else Command (argv, no shell).
	GuestAgentPing bool
	Command        []string
}

// Args renders p as kemu-launcher's argv after LauncherBinary: the
// subcommand, its flags, and the command after "--".
func (p Probe) Args() []string {
	args := []string{ProbeSubcommand,
		flagArg(flagProbeSocketsDir, p.SocketsDir),
		flagArg(flagProbeTimeout, strconv.FormatInt(int64(p.Timeout/time.Second), 10)),
	}
	if p.GuestAgentPing {
		return append(args, flagArg(flagProbeGuestAgentPin, "true"))
	}
	return append(append(args, "--"), p.Command...)
}

// ExecCommand is the full exec probe command (LauncherBinary first).
func (p Probe) ExecCommand() []string { return append([]string{LauncherBinary}, p.Args()...) }

// ParseProbe reads the subcommand's arguments (after ProbeSubcommand); out
// receives flag errors.
func ParseProbe(args []string, out io.Writer) (Probe, error) {
	p := Probe{SocketsDir: SocketsDir, Timeout: time.Second}
	fs := flag.NewFlagSet(LauncherBinary+" "+ProbeSubcommand, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&p.SocketsDir, flagProbeSocketsDir, p.SocketsDir, "where the launcher's socket is")
	secs := fs.Int(flagProbeTimeout, 1, "give up on the guest after this many seconds")
	fs.BoolVar(&p.GuestAgentPing, flagProbeGuestAgentPin, false, "ping the guest agent (else run the command after --)")
	if err := fs.Parse(args); err != nil {
		return p, err
	}
	if *secs < 1 || *secs > 86400 {
		return p, fmt.Errorf("--%s must be between 1 and 86400", flagProbeTimeout)
	}
	p.Timeout = time.Duration(*secs) * time.Second
	if fs.NArg() > 0 {
		p.Command = fs.Args()
	}
	switch {
	case p.GuestAgentPing && len(p.Command) > 0:
		return p, errors.New("--" + flagProbeGuestAgentPin + " takes no command")
	case !p.GuestAgentPing && len(p.Command) == 0:
		return p, errors.New("no command after -- (or --" + flagProbeGuestAgentPin + ")")
	}
	return p, nil
}
