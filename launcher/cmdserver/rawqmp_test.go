package cmdserver_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kemu-dev/kemu/api/launcherpod"
	"github.com/kemu-dev/kemu/launcher/cmdserver"
	"github.com/kemu-dev/kemu/launcher/rpc"
)

func TestCheckRawQMP(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cmd      string
		allowRaw bool
		want     string // the command name
		code     codes.Code
		msg      []string
	}{
		{name: "query", cmd: `{"execute":"query-status"}`, want: "query-status"},
		{name: "query with arguments and id", cmd: `{"execute":"query-cpus-fast","arguments":{},"id":"x"}`, want: "query-cpus-fast"},
		{name: "unknown query passes (QEMU answers CommandNotFound)", cmd: `{"execute":"query-no-such"}`, want: "query-no-such"},
		{name: "qom-list", cmd: `{"execute":"qom-list","arguments":{"path":"/"}}`, want: "qom-list"},
		{name: "stop refused", cmd: `{"execute":"stop"}`, want: "stop", code: codes.PermissionDenied,
			msg: []string{`"stop" is not a read-only command`, "--allow-raw-qmp", "query-*"}},
		{name: "HMP refused", cmd: `{"execute":"human-monitor-command","arguments":{"command-line":"info status"}}`,
			want: "human-monitor-command", code: codes.PermissionDenied, msg: []string{"human-monitor-command", "--allow-raw-qmp"}},
		{name: "qom-get refused", cmd: `{"execute":"qom-get","arguments":{"path":"/","property":"type"}}`, want: "qom-get", code: codes.PermissionDenied},
		{name: "prefix is not enough", cmd: `{"execute":"x-query-ramblock"}`, want: "x-query-ramblock", code: codes.PermissionDenied},
		{name: "case matters", cmd: `{"execute":"Query-status"}`, want: "Query-status", code: codes.PermissionDenied},
		{name: "duplicate execute: the last one counts, as QEMU gets it", cmd: `{"execute":"query-status","execute":"quit"}`,
			want: "quit", code: codes.PermissionDenied},
		{name: "exec-oob refused", cmd: `{"execute":"query-status","exec-oob":"migrate-recover"}`, want: "query-status",
			code: codes.PermissionDenied, msg: []string{`member "exec-oob"`, "--allow-raw-qmp"}},
		{name: "anything with the flag", cmd: `{"execute":"human-monitor-command","arguments":{"command-line":"info status"}}`,
			allowRaw: true, want: "human-monitor-command"},
		{name: "not JSON", cmd: `{"execute":`, code: codes.InvalidArgument, msg: []string{"not a JSON object"}},
		{name: "no execute", cmd: `{"arguments":{}}`, code: codes.InvalidArgument, msg: []string{`no "execute"`}},
		{name: "execute not a string", cmd: `{"execute":1}`, code: codes.InvalidArgument, msg: []string{"not a command name"}},
		{name: "not JSON even with the flag", cmd: `[]`, allowRaw: true, code: codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name, err := cmdserver.CheckRawQMP(tc.cmd, tc.allowRaw)
			if name != tc.want || status.Code(err) != tc.code {
				t.Fatalf("got %q, %v; want %q, code %s", name, err, tc.want, tc.code)
			}
			for _, m := range tc.msg {
				if !strings.Contains(status.Convert(err).Message(), m) {
					t.Errorf("message %q lacks %q", status.Convert(err).Message(), m)
				}
			}
		})
	}
}

// The allowlist applies before anything else (no VM needed to be refused);
// with AllowRawQMP the same command gets as far as the missing VM.
func TestQmpRefusedWithoutTheFlag(t *testing.T) {
	for _, allow := range []bool{false, true} {
		s := startServer(t, cmdserver.Options{SocketsDir: shortDir(t), AllowRawQMP: allow})
		c, _ := dial(t, s.Socket())
		_, err := c.Qmp(ctxFor(t, rpcTimeout), &rpc.QmpRequest{CommandJson: `{"execute":"system_reset"}`})
		if allow {
			wantCode(t, err, codes.FailedPrecondition, "Sync first")
		} else {
			wantCode(t, err, codes.PermissionDenied, "system_reset", "--"+launcherpod.FlagAllowRawQMP)
		}
	}
}

// Abandon before any Sync: nothing to stop, and no VM starts afterwards.
func TestAbandonBeforeSync(t *testing.T) {
	s := startServer(t, cmdserver.Options{SocketsDir: shortDir(t)})
	ctx := ctxFor(t, rpcTimeout)
	d, killed, err := s.Abandon(ctx)
	if err != nil || killed || d.State != rpc.DomainState_DOMAIN_STATE_UNSPECIFIED {
		t.Fatalf("Abandon: %s, %v, %v", d, killed, err)
	}
	c, _ := dial(t, s.Socket())
	_, err = c.Sync(ctx, &rpc.SyncRequest{VmiJson: []byte(`{"apiVersion": "kemu.dev/v1alpha1", "kind": "VirtualMachineInstance",
		"metadata": {"name": "late"}, "spec": {"domain": {"memory": {"guest": "64Mi"}, "devices": {"disks": [{"name": "root", "disk": {}}]}},
		"volumes": [{"name": "root", "containerDisk": {"image": "oci:/nonexistent"}}]}}`)})
	wantCode(t, err, codes.Unavailable, "stopping")
	if s.Launcher() != nil {
		t.Error("a launcher was created after Abandon")
	}
}
