package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/kemu-dev/kemu/api/launcherpod"
	"github.com/kemu-dev/kemu/launcher/cmdserver"
	"github.com/kemu-dev/kemu/launcher/rpc"
)

// maxProbeOutput bounds the line the probe subcommand prints (the kubelet
// puts it into the probe's event).
const maxProbeOutput = 1024

// runProbe is `kemu-launcher probe`: a VMI's exec or guestAgentPing probe
// (launcherpod.Probe, rendered by controller/template), KubeVirt's
// virt-probe. It asks the launcher on its socket, within the probe's
// timeout, and exits 0 (success), 1 (failure) or 2 (bad arguments).
func runProbe(args []string, stdout, stderr io.Writer) int {
	p, err := launcherpod.ParseProbe(args, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "kemu-launcher probe: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.Timeout)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+cmdserver.SocketPath(p.SocketsDir), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(stdout, bounded("launcher: "+err.Error()))
		return 1
	}
	defer func() { _ = conn.Close() }()
	msg, ok := probe(ctx, p, rpc.NewLauncherClient(conn))
	fmt.Fprintln(stdout, bounded(msg))
	if ok {
		return 0
	}
	return 1
}

// probe runs one check through the launcher: guest-ping, or the command in
// the guest (exit status 0 passes). A failed guest-ping passes while the
// domain is paused for a reason other than a fault, or migrating
// (KubeVirt's suppression: the agent cannot answer then, by design).
func probe(ctx context.Context, p launcherpod.Probe, c rpc.LauncherClient) (string, bool) {
	if p.GuestAgentPing {
		_, err := c.GuestPing(ctx, &rpc.Empty{}, grpc.WaitForReady(true))
		if err == nil {
			return "guest agent answered guest-ping", true
		}
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		if d, derr := c.GetDomain(dctx, &rpc.Empty{}); derr == nil && suppressed(d.GetDomain()) {
			return fmt.Sprintf("guest-ping failed, suppressed: the domain is %s (%s)", d.GetDomain().GetState(), d.GetDomain().GetReason()), true
		}
		return "guest-ping: " + status.Convert(err).Message(), false
	}
	r, err := c.GuestExec(ctx, &rpc.GuestExecRequest{Command: p.Command}, grpc.WaitForReady(true))
	switch {
	case err != nil && timedOut(ctx, err):
		return fmt.Sprintf("guest exec %s: no result within %s (the command may go on in the guest)", p.Command[0], p.Timeout), false
	case err != nil:
		return "guest exec: " + status.Convert(err).Message(), false
	case r.GetSignal() != 0:
		return fmt.Sprintf("%s: killed by signal %d in the guest", p.Command[0], r.GetSignal()), false
	case r.GetExitCode() != 0:
		return fmt.Sprintf("%s: exit status %d in the guest", p.Command[0], r.GetExitCode()), false
	}
	return p.Command[0] + ": exit status 0 in the guest", true
}

// timedOut says whether a call's error is the probe's timeout. The
// launcher sees the same deadline (gRPC carries it) and may end the stream
// a moment before the client's own timer fires: its RST_STREAM CANCEL
// arrives as Canceled while ctx.Err() is still nil. ctx is never canceled
// otherwise.
func timedOut(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return true
	}
	switch status.Code(err) {
	case codes.DeadlineExceeded, codes.Canceled:
		return true
	}
	return false
}

// suppressed: the guest agent is unreachable by design, not by a fault.
func suppressed(d *rpc.Domain) bool {
	switch d.GetState() {
	case rpc.DomainState_Migrating:
		return true
	case rpc.DomainState_Paused:
		switch d.GetReason() {
		case rpc.DomainReason_IOError, rpc.DomainReason_Crashed, rpc.DomainReason_GuestPanicked, rpc.DomainReason_MigrationFailed:
			return false
		}
		return true
	}
	return false
}

// bounded cuts s to maxProbeOutput bytes on one line.
func bounded(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > maxProbeOutput {
		s = strings.ToValidUTF8(s[:maxProbeOutput], "")
	}
	return s
}
