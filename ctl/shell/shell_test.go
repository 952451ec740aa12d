package shell

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/kemu-dev/kemu/ctl/cli"
	"github.com/kemu-dev/kemu/ctl/cli/clitest"
	"github.com/kemu-dev/kemu/launcher/rpc"
)

// fakeLauncher answers the command API with canned replies.
type fakeLauncher struct {
	rpc.UnimplementedLauncherServer

	// watchEnds makes WatchDomain end after its events instead of
	// following until the client leaves.
	watchEnds bool

	mu          sync.Mutex
	paused      bool
	calls       []string // RPC names, and "qmp <command json>"
	watchers    int      // WatchDomain streams open
	watchesDone int      // WatchDomain streams the client left
}

func (f *fakeLauncher) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

func (f *fakeLauncher) called(call string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if c == call {
			n++
		}
	}
	return n
}

func (f *fakeLauncher) domain() *rpc.Domain {
	d := &rpc.Domain{State: rpc.DomainState_Running, Reason: rpc.DomainReason_Booted, Seq: 3, QemuPid: 4242, QemuVersion: "7.2.0",
		Accelerator: "tcg", StartedUnixNano: time.Now().Add(-time.Minute).UnixNano(), SinceUnixNano: time.Now().UnixNano(),
		DeviceCgroup: "/sys/fs/cgroup/kemu-qemu-x",
		Interfaces: []*rpc.DomainInterface{{Name: "default", Mac: "02:00:00:00:00:01", IpAddresses: []string{"10.244.1.5"},
			GuestIp: "10.0.2.2/24", InfoSource: "domain", Queues: 2}}}
	if f.paused {
		d.State, d.Reason, d.Seq = rpc.DomainState_Paused, rpc.DomainReason_User, 4
	}
	return d
}

func (f *fakeLauncher) Info(_ context.Context, req *rpc.InfoRequest) (*rpc.InfoResponse, error) {
	f.record("Info")
	for _, v := range req.GetSupportedVersions() {
		if v == "v1" {
			return &rpc.InfoResponse{Version: "v1", SupportedVersions: []string{"v1"}, LauncherVersion: "fake"}, nil
		}
	}
	return nil, status.Error(codes.FailedPrecondition, "no common API version")
}

func (f *fakeLauncher) GetDomain(context.Context, *rpc.Empty) (*rpc.DomainResponse, error) {
	f.record("GetDomain")
	f.mu.Lock()
	defer f.mu.Unlock()
	return &rpc.DomainResponse{Domain: f.domain()}, nil
}

func (f *fakeLauncher) Pause(context.Context, *rpc.Empty) (*rpc.Empty, error) {
	f.record("Pause")
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.paused {
		return nil, status.Error(codes.FailedPrecondition, "the domain is Paused, not Running")
	}
	f.paused = true
	return &rpc.Empty{}, nil
}

func (f *fakeLauncher) Unpause(context.Context, *rpc.Empty) (*rpc.Empty, error) {
	f.record("Unpause")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.paused = false
	return &rpc.Empty{}, nil
}

func (f *fakeLauncher) Reset(context.Context, *rpc.Empty) (*rpc.Empty, error) {
	f.record("Reset")
	return nil, status.Error(codes.Unavailable, "QEMU is gone")
}

// CancelMigration: the fake is a source with no migration under way.
func (f *fakeLauncher) CancelMigration(context.Context, *rpc.Empty) (*rpc.Empty, error) {
	f.record("CancelMigration")
	return nil, status.Error(codes.FailedPrecondition, "launcher: not possible in the migration's state: no migration under way")
}

func (f *fakeLauncher) Shutdown(_ context.Context, req *rpc.ShutdownRequest) (*rpc.DomainResponse, error) {
	f.record(fmt.Sprintf("Shutdown %d", req.GetGracePeriodSeconds()))
	return &rpc.DomainResponse{Domain: &rpc.Domain{State: rpc.DomainState_Shutoff, Reason: rpc.DomainReason_GuestShutdown, Exited: true, Seq: 9}}, nil
}

func (f *fakeLauncher) GetStats(context.Context, *rpc.Empty) (*rpc.StatsResponse, error) {
	f.record("GetStats")
	return &rpc.StatsResponse{
		Vcpus:                  []*rpc.VCPU{{Index: 0, ThreadId: 77, CpuTimeNanos: int64(1500 * time.Millisecond)}},
		Blocks:                 []*rpc.BlockStat{{Device: "disk0", RdBytes: 3 << 20, RdOperations: 12}},
		BalloonActualBytes:     512 << 20,
		QemuCpuTimeNanos:       int64(2 * time.Second),
		QemuRssBytes:           140 << 20,
		GuestAgentLinesDropped: 3,
	}, nil
}

func (f *fakeLauncher) GuestPing(context.Context, *rpc.Empty) (*rpc.Empty, error) {
	f.record("GuestPing")
	return &rpc.Empty{}, nil
}

func (f *fakeLauncher) GuestInfo(context.Context, *rpc.Empty) (*rpc.GuestInfoResponse, error) {
	f.record("GuestInfo")
	return &rpc.GuestInfoResponse{Hostname: "testguest", OsPrettyName: "Test Linux", KernelRelease: "6.1.0",
		Interfaces: []*rpc.GuestInterface{{Name: "eth0", Mac: "52:54:00:00:00:01", IpAddresses: []string{"10.0.2.2/24"}}}}, nil
}

func (f *fakeLauncher) Qmp(_ context.Context, req *rpc.QmpRequest) (*rpc.QmpResponse, error) {
	f.record("qmp " + req.GetCommandJson())
	var cmd struct {
		Execute string `json:"execute"`
	}
	if err := json.Unmarshal([]byte(req.GetCommandJson()), &cmd); err != nil {
		return nil, status.Error(codes.InvalidArgument, "not JSON")
	}
	switch cmd.Execute {
	case "query-status":
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.paused {
			return &rpc.QmpResponse{ReplyJson: `{"return": {"status": "paused", "singlestep": false, "running": false}}`}, nil
		}
		return &rpc.QmpResponse{ReplyJson: `{"return": {"status": "running", "singlestep": false, "running": true}}`}, nil
	case "query-commands":
		return &rpc.QmpResponse{ReplyJson: `{"return": [{"name": "stop"}, {"name": "query-version"}, {"name": "cont"},
			{"name": "query-status"}, {"name": "query-commands"}, {"name": "human-monitor-command"}]}`}, nil
	case "human-monitor-command":
		return &rpc.QmpResponse{ReplyJson: `{"return": "VM status: running\r\n"}`}, nil
	case "stop", "cont":
		return &rpc.QmpResponse{ReplyJson: `{"return": {}}`}, nil
	}
	return &rpc.QmpResponse{ReplyJson: fmt.Sprintf(`{"error": {"class": "CommandNotFound", "desc": "The command %s has not been found"}}`, cmd.Execute)}, nil
}

func (f *fakeLauncher) WatchDomain(req *rpc.WatchRequest, stream grpc.ServerStreamingServer[rpc.WatchEvent]) error {
	f.record(fmt.Sprintf("WatchDomain qmp=%v", req.GetQmpEvents()))
	f.mu.Lock()
	f.watchers++
	d := f.domain()
	f.mu.Unlock()
	events := []*rpc.WatchEvent{
		{Event: &rpc.WatchEvent_Domain{Domain: d}},
		{Event: &rpc.WatchEvent_QmpEvent{QmpEvent: &rpc.QmpEvent{Name: "STOP", DataJson: "{}", TimestampUnixNano: time.Now().UnixNano()}}},
		{Event: &rpc.WatchEvent_QmpEvent{QmpEvent: &rpc.QmpEvent{Name: "RTC_CHANGE", DataJson: `{"offset":1}`, TimestampUnixNano: time.Now().UnixNano()}}},
	}
	for _, ev := range events {
		if err := stream.Send(ev); err != nil {
			return err
		}
	}
	if !f.watchEnds {
		<-stream.Context().Done()
		f.mu.Lock()
		f.watchesDone++
		f.mu.Unlock()
	}
	return nil
}

// Console echoes its input back, prefixed.
func (f *fakeLauncher) Console(stream grpc.BidiStreamingServer[rpc.ConsoleInput, rpc.ConsoleOutput]) error {
	f.record("Console")
	for {
		in, err := stream.Recv()
		if err != nil {
			return nil
		}
		if err := stream.Send(&rpc.ConsoleOutput{Data: append([]byte("echo: "), in.GetData()...)}); err != nil {
			return err
		}
	}
}

// startFake serves f on a unix socket and returns the socket's path.
func startFake(t *testing.T, f rpc.LauncherServer) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kemush-") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "launcher.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rpc.RegisterLauncherServer(srv, f)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Stop()
		os.RemoveAll(dir)
	})
	return sock
}

func TestShellCommands(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string // after shell --socket SOCK
		stdin    string
		watchEnd bool
		code     int
		stdout   []string
		notOut   []string
		stderr   []string
		calls    []string
	}{
		{name: "status", args: []string{"-c", "status"},
			stdout: []string{"state:    Running (Booted)", "pid 4242, version 7.2.0, accelerator tcg", "agent:    not connected", "seq:      3",
				"cgroup:   /sys/fs/cgroup/kemu-qemu-x", "nic:      default 02:00:00:00:00:01 at 10.244.1.5 (guest 10.0.2.2/24), 2 queues"},
			calls: []string{"Info", "GetDomain"}},
		{name: "pause then status", args: []string{"-c", "pause; status"},
			stdout: []string{"paused\n", "state:    Paused (User)"}, calls: []string{"Pause", "GetDomain"}},
		{name: "resume", args: []string{"-c", "pause;resume;status"},
			stdout: []string{"resumed\n", "Running (Booted)"}, calls: []string{"Unpause"}},
		{name: "qmp query-status", args: []string{"-c", "qmp query-status"},
			stdout: []string{`"status": "running"`, `"running": true`},
			calls:  []string{`qmp {"execute":"query-status"}`}},
		{name: "qmp with arguments containing a semicolon", args: []string{"-c", `qmp human-monitor-command {"command-line": "info status; info version"}; status`},
			stdout: []string{"VM status: running\r\nstate:", "Running (Booted)"},
			calls:  []string{`qmp {"execute":"human-monitor-command","arguments":{"command-line":"info status; info version"}}`}},
		{name: "qmp returning nothing", args: []string{"-c", "qmp stop"}, stdout: []string{"ok\n"}},
		{name: "qmp error", args: []string{"-c", "qmp nope; status"}, code: 1,
			stderr: []string{"error: qmp nope: CommandNotFound: The command nope has not been found"}, notOut: []string{"state:"}},
		{name: "qmp bad arguments", args: []string{"-c", "qmp stop [1]"}, code: 1,
			stderr: []string{"error: qmp stop: the arguments must be one JSON object"}},
		{name: "failing command stops the rest", args: []string{"-c", "pause; pause; status"}, code: 1,
			stdout: []string{"paused\n"}, notOut: []string{"state:"},
			stderr: []string{"error: FailedPrecondition: the domain is Paused, not Running\n"}},
		{name: "unavailable", args: []string{"-c", "reset"}, code: 1, stderr: []string{"error: Unavailable: QEMU is gone\n"}},
		{name: "migrate-cancel without a migration", args: []string{"-c", "migrate-cancel"}, code: 1,
			stderr: []string{"error: FailedPrecondition: launcher: not possible in the migration's state: no migration under way\n"},
			calls:  []string{"CancelMigration"}},
		{name: "unknown command", args: []string{"-c", "frobnicate"}, code: 1, stderr: []string{`error: unknown command "frobnicate"`}},
		{name: "exit stops", args: []string{"-c", "exit; status"}, notOut: []string{"state:"}},
		{name: "shutdown with grace", args: []string{"-c", "shutdown 1m"}, stdout: []string{"Shutoff (GuestShutdown)", "exited:   status 0"},
			calls: []string{"Shutdown 60"}},
		{name: "shutdown bad grace", args: []string{"-c", "shutdown soon"}, code: 1, stderr: []string{`grace period "soon"`}},
		{name: "stats", args: []string{"-c", "stats"},
			stdout: []string{"qemu: cpu time 2s, resident 140.0 MiB", "vcpu 0: thread 77, cpu time 1.5s", "block disk0: read 3.0 MiB in 12 ops", "balloon: 512.0 MiB",
				"guest agent: 3 oversize lines dropped"}},
		{name: "agent", args: []string{"-c", "agent ping; agent info"},
			stdout: []string{"agent: ok", "hostname:  testguest", "os:        Test Linux", "interface: eth0 52:54:00:00:00:01 10.0.2.2/24"}},
		{name: "agent without subcommand", args: []string{"-c", "agent"}, code: 1, stderr: []string{"usage: agent ping|info"}},
		{name: "events", args: []string{"-c", "events"}, watchEnd: true,
			stdout: []string{"domain Running (Booted) [seq 3]", "qmp STOP\n", `qmp RTC_CHANGE {"offset":1}`},
			calls:  []string{"WatchDomain qmp=true"}},
		{name: "console", args: []string{"-c", "console"}, stdin: "hello\n", stdout: []string{"echo: hello\n"}},
		{name: "help", args: []string{"-c", "help"}, stdout: []string{"qmp <command> [json args]", "agent ping|info", "events"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeLauncher{watchEnds: tc.watchEnd}
			sock := startFake(t, f)
			stdout, stderr, code := run(t, tc.stdin, append([]string{"shell", "--socket", sock}, tc.args...)...)
			if code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
			for _, want := range tc.stdout {
				if !strings.Contains(stdout, want) {
					t.Errorf("stdout lacks %q", want)
				}
			}
			for _, not := range tc.notOut {
				if strings.Contains(stdout, not) {
					t.Errorf("stdout has %q", not)
				}
			}
			for _, want := range tc.stderr {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q", want)
				}
			}
			for _, call := range tc.calls {
				if f.called(call) == 0 {
					t.Errorf("the launcher got no %s (got %q)", call, f.calls)
				}
			}
			if t.Failed() {
				t.Logf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
			}
		})
	}
}

func TestShellJSONOutput(t *testing.T) {
	f := &fakeLauncher{watchEnds: true}
	sock := startFake(t, f)
	stdout, stderr, code := run(t, "", "shell", "--socket", sock, "-o", "json", "-c", "status; pause; qmp query-status; agent info; events")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 7 { // status, pause, qmp, agent info, 3 events
		t.Fatalf("%d lines, want 7:\n%s", len(lines), stdout)
	}
	var objs []map[string]any
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not JSON: %q: %v", l, err)
		}
		objs = append(objs, m)
	}
	dom, _ := objs[0]["domain"].(map[string]any)
	if dom["state"] != "Running" || dom["qemuPid"] != float64(4242) || dom["agentConnected"] != false {
		t.Errorf("status: %v", objs[0])
	}
	if len(objs[1]) != 0 {
		t.Errorf("pause: %v, want {}", objs[1])
	}
	ret, _ := objs[2]["return"].(map[string]any)
	if ret["status"] != "paused" {
		t.Errorf("qmp query-status: %v", objs[2])
	}
	if objs[3]["hostname"] != "testguest" {
		t.Errorf("agent info: %v", objs[3])
	}
	if _, ok := objs[4]["domain"]; !ok {
		t.Errorf("first event: %v", objs[4])
	}
	if q, _ := objs[5]["qmpEvent"].(map[string]any); q["name"] != "STOP" {
		t.Errorf("second event: %v", objs[5])
	}
	if strings.TrimSpace(stderr) != "" {
		t.Errorf("stderr: %s", stderr)
	}

	// A failing qmp command still prints QEMU's reply.
	stdout, _, code = run(t, "", "shell", "--socket", sock, "-o", "json", "-c", "qmp nope")
	if code != 1 || !strings.Contains(stdout, `"class":"CommandNotFound"`) {
		t.Errorf("qmp nope: exit %d, stdout %q", code, stdout)
	}
}

func TestShellArguments(t *testing.T) {
	f := &fakeLauncher{}
	sock := startFake(t, f)
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"by name", []string{"shell", "myvm", "-n", "ns", "-c", "status", "-o", "json"}, 1, `through the Pod: ns/myvm "status" batch=true json=true`},
		{"name and socket", []string{"shell", "--socket", sock, "myvm"}, 2, "either --socket PATH or a VMI name"},
		{"nothing", []string{"shell"}, 2, "--socket PATH is required"},
		{"bad output", []string{"shell", "--socket", sock, "-o", "yaml", "-c", "status"}, 2, `-o "yaml"`},
		{"no socket", []string{"shell", "--socket", "/nonexistent/launcher.sock", "-c", "status"}, 1, "error: launcher socket: stat /nonexistent/launcher.sock: no such file or directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := run(t, "", tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.stderr) {
				t.Errorf("exit %d (want %d), stderr %q (want %q), stdout %q", code, tc.code, stderr, tc.stderr, stdout)
			}
		})
	}
	if f.called("GetDomain") != 0 {
		t.Errorf("a refused invocation reached the launcher: %q", f.calls)
	}
}

// A launcher speaking another API version is refused.
type futureLauncher struct{ fakeLauncher }

func (f *futureLauncher) Info(context.Context, *rpc.InfoRequest) (*rpc.InfoResponse, error) {
	return &rpc.InfoResponse{Version: "v2", SupportedVersions: []string{"v2"}}, nil
}

func TestShellVersionNegotiation(t *testing.T) {
	dir, err := os.MkdirTemp("", "kemush-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rpc.RegisterLauncherServer(srv, &futureLauncher{})
	go func() { _ = srv.Serve(l) }()
	defer srv.Stop()
	_, stderr, code := run(t, "", "shell", "--socket", sock, "-c", "status")
	if code != 1 || !strings.Contains(stderr, `the launcher speaks API "v2"`) {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

func TestSplitCommands(t *testing.T) {
	for in, want := range map[string][]string{
		"status; pause ;;resume":            {"status", "pause", "resume"},
		`qmp x {"a": "b;c", "d": [";"]}; s`: {`qmp x {"a": "b;c", "d": [";"]}`, "s"},
		`qmp x {"a": "\";"}; s`:             {`qmp x {"a": "\";"}`, "s"},
		"  ":                                nil,
	} {
		if got := splitCommands(in); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("splitCommands(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestShellComplete(t *testing.T) {
	f := &fakeLauncher{}
	sock := startFake(t, f)
	conn, err := grpc.NewClient("unix:"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	s := &shell{client: rpc.NewLauncherClient(conn)}
	for _, tc := range []struct {
		line       string
		head, tail string
		want       []string
	}{
		{"sta", "", "", []string{"status ", "stats "}},
		{"p", "", "", []string{"pause "}},
		{"agent ", "agent ", "", []string{"ping ", "info "}},
		{"qmp query-", "qmp ", "", []string{"query-commands ", "query-status ", "query-version "}},
		{"status; qmp co", "status; qmp ", "", []string{"cont "}},
		{"help ex", "help ", "", []string{"exit "}},
		{"status x", "status ", "", nil},
	} {
		head, got, tail := s.complete(tc.line, len(tc.line))
		if head != tc.head || tail != tc.tail || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("complete(%q) = %q, %q, %q; want %q, %q, %q", tc.line, head, got, tail, tc.head, tc.want, tc.tail)
		}
	}
	if n := f.called(`qmp {"execute":"query-commands"}`); n != 1 {
		t.Errorf("query-commands sent %d times, want once", n)
	}
}

// newRoot is kemuctl with only the shell; shell VMI reports its arguments
// instead of reaching a cluster (cmd/kemuctl tests the real one).
func newRoot() *cobra.Command {
	c := cli.NewCluster()
	return cli.Root(cli.Name, c, NewCommand(ThroughPod{Socket: "/var/run/kemu/sockets/launcher.sock",
		Run: func(cmd *cobra.Command, name, commands string, jsonOut, batch bool) error {
			namespace, err := c.Namespace()
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "through the Pod: %s/%s %q batch=%v json=%v\n", namespace, name, commands, batch, jsonOut)
			return cli.ExitError{Code: 1}
		}}))
}

// run executes kemuctl shell with args and stdin, returning stdout, stderr
// and the exit status main would use.
func run(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	return clitest.Run(t, newRoot(), stdin, args...)
}
