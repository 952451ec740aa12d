package launcherpod

import (
	"io"
	"reflect"
	"testing"
	"time"
)

func TestProbeRoundTrip(t *testing.T) {
	for _, p := range []Probe{
		{SocketsDir: SocketsDir, Timeout: 3 * time.Second, GuestAgentPing: true},
		{SocketsDir: "/x", Timeout: time.Second, Command: []string{"cat", "--", "-x", "/tmp/ready"}},
		{SocketsDir: SocketsDir, Timeout: 86400 * time.Second, Command: []string{"--guest-agent-ping"}},
	} {
		args := p.ExecCommand()
		if args[0] != LauncherBinary || args[1] != ProbeSubcommand {
			t.Fatalf("ExecCommand() = %q", args)
		}
		got, err := ParseProbe(args[2:], io.Discard)
		if err != nil {
			t.Fatalf("ParseProbe(%q): %v", args, err)
		}
		if !reflect.DeepEqual(got, p) {
			t.Errorf("round trip of %+v: %+v", p, got)
		}
	}
}

func TestParseProbeRefuses(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"--guest-agent-ping", "--", "cat"},
		{"--timeout-seconds=0", "--guest-agent-ping"},
		{"--timeout-seconds=99999999", "--", "true"},
		{"--bogus", "--", "true"},
	} {
		if _, err := ParseProbe(args, io.Discard); err == nil {
			t.Errorf("ParseProbe(%q): no error", args)
		}
	}
}
