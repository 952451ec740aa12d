package cmdserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/klog/v2"

	"github.com/kemu-dev/kemu/api/launcherpod"
	"github.com/kemu-dev/kemu/api/manifest"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/api/validation"
	"github.com/kemu-dev/kemu/launcher"
	"github.com/kemu-dev/kemu/launcher/rpc"
	"github.com/kemu-dev/kemu/qmp"
)

// Sync actions.
const (
	ActionStarted   = "started"
	ActionUnchanged = "unchanged"
	ActionUpdated   = "updated"
)

const defaultAgentTimeout = 10 * time.Second

// Info negotiates the API version.
func (s *Server) Info(_ context.Context, req *rpc.InfoRequest) (*rpc.InfoResponse, error) {
	if len(req.GetSupportedVersions()) > 0 {
		ok := false
		for _, v := range req.GetSupportedVersions() {
			ok = ok || v == APIVersion
		}
		if !ok {
			return nil, status.Errorf(codes.FailedPrecondition, "no common API version: the launcher speaks %s, the client %v",
				APIVersion, req.GetSupportedVersions())
		}
	}
	return &rpc.InfoResponse{Version: APIVersion, SupportedVersions: []string{APIVersion}, LauncherVersion: s.opts.Version,
		VmiUid: string(s.opts.VMIUID)}, nil
}

// Ping answers "ok".
func (s *Server) Ping(context.Context, *rpc.PingRequest) (*rpc.PingResponse, error) {
	return &rpc.PingResponse{Status: "ok"}, nil
}

// DecodeVMI decodes a VMI from JSON (or YAML) strictly, defaults and
// validates it; errors are InvalidArgument with every bad field path.
func DecodeVMI(b []byte) (*v1.VirtualMachineInstance, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, status.Error(codes.InvalidArgument, "vmi_json: empty")
	}
	docs, err := manifest.Read(bytes.NewReader(b))
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "vmi_json: malformed: %v", err)
	}
	if len(docs) != 1 {
		return nil, status.Errorf(codes.InvalidArgument, "vmi_json: %d objects, want one VirtualMachineInstance", len(docs))
	}
	d := docs[0]
	if len(d.Errors) > 0 {
		msgs := make([]string, 0, len(d.Errors))
		for _, e := range d.Errors {
			msgs = append(msgs, e.Error())
		}
		return nil, status.Errorf(codes.InvalidArgument, "%s is not valid: %s", d.Describe(), strings.Join(msgs, "; "))
	}
	vmi, ok := d.Object.(*v1.VirtualMachineInstance)
	if !ok {
		return nil, status.Errorf(codes.InvalidArgument, "kind: %s, want %s", d.Kind, manifest.KindVMI)
	}
	if vmi.Namespace == "" {
		vmi.Namespace = "default"
	}
	return vmi, nil
}

// Sync starts the VMI on the first call and reconciles later ones.
func (s *Server) Sync(ctx context.Context, req *rpc.SyncRequest) (*rpc.SyncResponse, error) {
	l, action, err := s.define(ctx, req, (*launcher.Launcher).Start)
	if err != nil {
		return nil, err
	}
	return &rpc.SyncResponse{Domain: s.domain(l), Action: action}, nil
}

// define decodes and checks the VMI and, on the first call, starts it with
// start (Start, or StartIncoming for a migration target); a later call
// reconciles with the running VM.
func (s *Server) define(ctx context.Context, req *rpc.SyncRequest, start func(*launcher.Launcher, context.Context) error) (*launcher.Launcher, string, error) {
	vmi, err := DecodeVMI(req.GetVmiJson())
	if err != nil {
		return nil, "", err
	}
	if want := s.opts.VMIUID; want != "" && vmi.UID != want {
		return nil, "", status.Errorf(codes.FailedPrecondition, "metadata.uid: this launcher was started for VMI uid %q (--%s), not VMI %s uid %q",
			want, launcherpod.FlagVMIUID, klog.KObj(vmi), vmi.UID)
	}
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	if l := s.Launcher(); l != nil {
		r, err := s.reconcile(l, vmi)
		if err != nil {
			return nil, "", err
		}
		return l, r.Action, nil
	}
	if s.isAbandoned() {
		return nil, "", errAbandoned
	}
	cfg := s.opts.Config
	cfg.VMI = vmi
	var l *launcher.Launcher
	if !s.opts.AllowRawQMP {
		// Runs during l.Start, once l is set.
		cfg.Hooks = append(slices.Clip(cfg.Hooks), func(ctx context.Context, m *qmp.Monitor) error {
			return RemoveDebugQMP(ctx, m, l.DebugQMPSocket())
		})
	}
	l, err = launcher.New(cfg)
	if err != nil {
		return nil, "", status.Error(codes.InvalidArgument, err.Error())
	}
	klog.InfoS("Starting the VM", "vmi", klog.KObj(vmi), "uid", vmi.UID)
	// Not the RPC's context: a client that goes away must not abort a start
	// half way (Abandon may).
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.StartTimeout)
	defer cancel()
	s.mu.Lock()
	abandoned := s.abandoned
	s.cancelStart = cancel
	s.mu.Unlock()
	if abandoned {
		return nil, "", errAbandoned
	}
	startErr := start(l, sctx)
	s.mu.Lock()
	s.setLauncherLocked(l)
	s.mu.Unlock()
	if startErr != nil {
		return nil, "", status.Errorf(codes.Aborted, "starting the VM failed: %v", startErr)
	}
	return l, ActionStarted, nil
}

// reconcile compares a Sync with the running VM. Only
// terminationGracePeriodSeconds may change live.
func (s *Server) reconcile(l *launcher.Launcher, vmi *v1.VirtualMachineInstance) (*rpc.SyncResponse, error) {
	s.mu.Lock()
	cur := s.vmi
	s.mu.Unlock()
	if cur.UID != "" && vmi.UID != "" && cur.UID != vmi.UID {
		return nil, status.Errorf(codes.FailedPrecondition, "this launcher runs VMI %s uid %s, not uid %s", klog.KObj(cur), cur.UID, vmi.UID)
	}
	if cur.Namespace != vmi.Namespace || cur.Name != vmi.Name {
		return nil, status.Errorf(codes.FailedPrecondition, "this launcher runs VMI %s, not %s", klog.KObj(cur), klog.KObj(vmi))
	}
	if equality.Semantic.DeepEqual(cur.Spec, vmi.Spec) {
		return &rpc.SyncResponse{Domain: s.domain(l), Action: ActionUnchanged}, nil
	}
	a, b := cur.Spec.DeepCopy(), vmi.Spec.DeepCopy()
	a.TerminationGracePeriodSeconds, b.TerminationGracePeriodSeconds = nil, nil
	links := linkChanges(a, b)
	if changed := diffPaths("spec", a, b); len(changed) > 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "cannot change while the VM runs: %s", strings.Join(changed, ", "))
	}
	if err := s.applyLinks(l, links); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.vmi = vmi
	if g := vmi.Spec.TerminationGracePeriodSeconds; g != nil {
		s.grace = time.Duration(*g) * time.Second
	}
	s.mu.Unlock()
	klog.InfoS("VMI updated", "vmi", klog.KObj(vmi), "terminationGracePeriodSeconds", vmi.Spec.TerminationGracePeriodSeconds)
	return &rpc.SyncResponse{Domain: s.domain(l), Action: ActionUpdated}, nil
}

// diffPaths names the JSON paths where a and b differ (at most 10).
func diffPaths(root string, a, b any) []string {
	var ma, mb any
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	_ = json.Unmarshal(ja, &ma)
	_ = json.Unmarshal(jb, &mb)
	var out []string
	var walk func(p string, x, y any)
	walk = func(p string, x, y any) {
		if len(out) >= 10 {
			return
		}
		xm, ok1 := x.(map[string]any)
		ym, ok2 := y.(map[string]any)
		if !ok1 || !ok2 {
			if !equality.Semantic.DeepEqual(x, y) {
				out = append(out, p)
			}
			return
		}
		keys := map[string]bool{}
		for k := range xm {
			keys[k] = true
		}
		for k := range ym {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			walk(p+"."+k, xm[k], ym[k])
		}
	}
	walk(root, ma, mb)
	return out
}

// need returns the launcher if the domain is in one of the states.
func (s *Server) need(what string, states ...launcher.State) (*launcher.Launcher, error) {
	l := s.Launcher()
	if l == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "%s: no VM yet: Sync first", what)
	}
	d := l.Domain()
	if d.State == launcher.StateShutoff {
		return nil, status.Errorf(codes.Unavailable, "%s: QEMU is gone: %s", what, d)
	}
	if len(states) == 0 {
		return l, nil
	}
	for _, st := range states {
		if d.State == st {
			return l, nil
		}
	}
	return nil, status.Errorf(codes.FailedPrecondition, "%s: the domain is %s, want %v", what, d, states)
}

// toStatus maps a launcher or QMP error to a gRPC status.
func toStatus(what string, l *launcher.Launcher, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return status.Errorf(codes.DeadlineExceeded, "%s: %v", what, err)
	case errors.Is(err, context.Canceled):
		return status.Errorf(codes.Canceled, "%s: %v", what, err)
	case errors.Is(err, qmp.ErrClosed):
		return status.Errorf(codes.Unavailable, "%s: QEMU is gone: %v", what, err)
	}
	if l != nil && l.Domain().State == launcher.StateShutoff {
		return status.Errorf(codes.Unavailable, "%s: QEMU is gone: %v", what, err)
	}
	if errors.Is(err, launcher.ErrMigrationState) || errors.Is(err, launcher.ErrPostCopy) {
		return status.Errorf(codes.FailedPrecondition, "%s: %v", what, err)
	}
	var qe *qmp.Error
	if errors.As(err, &qe) {
		return status.Errorf(codes.FailedPrecondition, "%s: QEMU refused: %v", what, err)
	}
	return status.Errorf(codes.Internal, "%s: %v", what, err)
}

// Pause stops the guest's CPUs.
func (s *Server) Pause(ctx context.Context, _ *rpc.Empty) (*rpc.Empty, error) {
	l, err := s.need("pause", launcher.StateRunning)
	if err != nil {
		return nil, err
	}
	return &rpc.Empty{}, toStatus("pause", l, l.Pause(ctx))
}

// Unpause resumes the guest's CPUs.
func (s *Server) Unpause(ctx context.Context, _ *rpc.Empty) (*rpc.Empty, error) {
	l, err := s.need("unpause", launcher.StatePaused)
	if err != nil {
		return nil, err
	}
	return &rpc.Empty{}, toStatus("unpause", l, l.Unpause(ctx))
}

// Reset resets the machine.
func (s *Server) Reset(ctx context.Context, _ *rpc.Empty) (*rpc.Empty, error) {
	l, err := s.need("reset", launcher.StateRunning, launcher.StatePaused)
	if err != nil {
		return nil, err
	}
	return &rpc.Empty{}, toStatus("reset", l, l.Reset(ctx))
}

// SoftReboot asks the guest to reboot itself: through its agent when it is
// connected, else Ctrl+Alt+Delete on its keyboard (QMP send-key). Only a
// running guest sees either. The reply says which.
func (s *Server) SoftReboot(ctx context.Context, _ *rpc.Empty) (*rpc.SoftRebootResponse, error) {
	l, err := s.need("soft reboot", launcher.StateRunning)
	if err != nil {
		return nil, err
	}
	method, err := l.SoftReboot(ctx)
	if err != nil {
		return nil, toStatus("soft reboot", l, err)
	}
	klog.InfoS("Soft reboot requested", "vmi", klog.KObj(l.VMI()), "method", method)
	return &rpc.SoftRebootResponse{Method: method}, nil
}

// Shutdown shuts the guest down gracefully.
func (s *Server) Shutdown(ctx context.Context, req *rpc.ShutdownRequest) (*rpc.DomainResponse, error) {
	l := s.Launcher()
	if l == nil {
		return nil, status.Error(codes.FailedPrecondition, "shutdown: no VM yet: Sync first")
	}
	s.setStopRequested()
	d, err := s.ShutdownVM(ctx, time.Duration(req.GetGracePeriodSeconds())*time.Second)
	if err != nil {
		return nil, toStatus("shutdown", l, err)
	}
	return &rpc.DomainResponse{Domain: s.domainOf(d)}, nil
}

// Kill ends QEMU with SIGKILL.
func (s *Server) Kill(ctx context.Context, _ *rpc.Empty) (*rpc.DomainResponse, error) {
	l := s.Launcher()
	if l == nil {
		return nil, status.Error(codes.FailedPrecondition, "kill: no VM yet: Sync first")
	}
	s.setStopRequested()
	d, err := l.Kill(ctx)
	if err != nil {
		return nil, toStatus("kill", l, err)
	}
	return &rpc.DomainResponse{Domain: s.domainOf(d)}, nil
}

// GetDomain returns the domain's state.
func (s *Server) GetDomain(context.Context, *rpc.Empty) (*rpc.DomainResponse, error) {
	l := s.Launcher()
	if l == nil {
		return nil, status.Error(codes.FailedPrecondition, "no VM yet: Sync first")
	}
	return &rpc.DomainResponse{Domain: s.domain(l)}, nil
}

func (s *Server) domain(l *launcher.Launcher) *rpc.Domain { return s.domainOf(l.Domain()) }

func (s *Server) domainOf(d launcher.Domain) *rpc.Domain {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &rpc.Domain{
		State: d.State, Reason: d.Reason, Message: d.Message, Seq: int64(d.Seq),
		SinceUnixNano: unixNano(d.Since), QemuPid: int32(d.PID), QemuVersion: s.qemuVer,
		Accelerator: d.Accel, AgentConnected: d.AgentConnected, StartedUnixNano: unixNano(s.startedAt),
		DeviceCgroup: d.DeviceCgroup, SelinuxContext: d.SELinuxContext, StopSignal: d.StopSignal,
	}
	for _, i := range d.Interfaces {
		out.Interfaces = append(out.Interfaces, &rpc.DomainInterface{Name: i.Name, Mac: i.MAC, IpAddresses: i.IPs,
			GuestIp: i.GuestIP, InfoSource: i.InfoSource, Queues: int32(i.Queues), LinkState: linkState(i)})
	}
	if s.vmi != nil {
		out.VmiUid = string(s.vmi.UID)
	}
	if d.ExitCode != nil {
		out.Exited, out.ExitCode = true, int32(*d.ExitCode)
	}
	out.Migration = migrationOf(d.Migration)
	return out
}

// migrationOf is a migration's progress on the wire (nil: none).
func migrationOf(m *launcher.Migration) *rpc.MigrationState {
	if m == nil {
		return nil
	}
	return &rpc.MigrationState{Role: m.Role, Status: m.Status, Mode: m.Mode,
		BytesTotal: m.BytesTotal, BytesTransferred: m.BytesTransferred, BytesRemaining: m.BytesRemaining,
		DirtyPagesRate: m.DirtyPagesRate, Passes: m.Passes, DowntimeMs: m.Downtime.Milliseconds(),
		TotalMs: m.Total.Milliseconds(), SetupMs: m.Setup.Milliseconds(),
		DiskBytesTotal: m.DiskBytesTotal, DiskBytesCopied: m.DiskBytesCopied,
		Message: m.Message, StartedUnixNano: unixNano(m.Started)}
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// GetStats reads vCPU, block and balloon figures.
func (s *Server) GetStats(ctx context.Context, _ *rpc.Empty) (*rpc.StatsResponse, error) {
	l, err := s.need("stats")
	if err != nil {
		return nil, err
	}
	st, err := l.Stats(ctx)
	if err != nil {
		return nil, toStatus("stats", l, err)
	}
	pid := l.Domain().PID
	out := &rpc.StatsResponse{}
	for _, c := range st.VCPUs {
		out.Vcpus = append(out.Vcpus, &rpc.VCPU{Index: int32(c.CPUIndex), ThreadId: int32(c.ThreadID),
			CpuTimeNanos: threadCPUTime(pid, c.ThreadID), DelayNanos: threadRunDelay(pid, c.ThreadID)})
	}
	for _, b := range st.Blocks {
		out.Blocks = append(out.Blocks, &rpc.BlockStat{Device: b.Device, NodeName: b.NodeName, Drive: b.Drive,
			RdBytes: b.Stats.RdBytes, WrBytes: b.Stats.WrBytes, RdOperations: b.Stats.RdOperations, WrOperations: b.Stats.WrOperations,
			RdTotalTimeNanos: b.Stats.RdTotalTimeNs, WrTotalTimeNanos: b.Stats.WrTotalTimeNs,
			FlushOperations: b.Stats.FlushOperations, FlushTotalTimeNanos: b.Stats.FlushTotalTimeNs})
	}
	if st.Balloon != nil {
		out.BalloonActualBytes = st.Balloon.Actual
	}
	if st.GuestMemory != nil {
		out.GuestMemory = guestMemory(st.GuestMemory)
	}
	for _, n := range st.NICs {
		out.Interfaces = append(out.Interfaces, &rpc.InterfaceStat{Name: n.Interface,
			RxBytes: int64(n.RxBytes), RxPackets: int64(n.RxPackets), RxErrors: int64(n.RxErrors), RxDropped: int64(n.RxDropped),
			TxBytes: int64(n.TxBytes), TxPackets: int64(n.TxPackets), TxErrors: int64(n.TxErrors), TxDropped: int64(n.TxDropped)})
	}
	out.Migration = migrationOf(st.Migration)
	out.QemuCpuTimeNanos, out.QemuRssBytes = st.CPU.Nanoseconds(), int64(st.RSS)
	out.GuestAgentLinesDropped = int64(qmp.AgentLinesDropped())
	return out, nil
}

// clockTicks is USER_HZ, 100 on every Linux architecture kemu runs on.
const clockTicks = 100

// threadCPUTime reads utime+stime of a QEMU thread; 0 if unknown.
func threadCPUTime(pid, tid int) int64 {
	if pid <= 0 || tid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
	if err != nil {
		return 0
	}
	// The command name may hold spaces and parentheses: fields start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return (u + st) * int64(time.Second/clockTicks)
}

func agentCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, defaultAgentTimeout)
}

// GuestPing checks that the guest agent answers.
func (s *Server) GuestPing(ctx context.Context, _ *rpc.Empty) (*rpc.Empty, error) {
	l, err := s.need("guest ping")
	if err != nil {
		return nil, err
	}
	ctx, cancel := agentCtx(ctx)
	defer cancel()
	return &rpc.Empty{}, toStatus("guest ping", l, l.GuestPing(ctx))
}

// GuestExec runs a command in the guest through the guest agent and waits
// for its exit status (an exec probe). The command is bounded as a VMI's
// exec probe is (InvalidArgument otherwise).
func (s *Server) GuestExec(ctx context.Context, req *rpc.GuestExecRequest) (*rpc.GuestExecResponse, error) {
	if err := validation.ValidateProbeCommand(req.GetCommand()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "guest exec: %v", err)
	}
	l, err := s.need("guest exec")
	if err != nil {
		return nil, err
	}
	ctx, cancel := agentCtx(ctx)
	defer cancel()
	r, err := l.GuestRun(ctx, req.GetCommand())
	if err != nil {
		return nil, toStatus("guest exec", l, err)
	}
	return &rpc.GuestExecResponse{ExitCode: int32(r.ExitCode), Signal: int32(r.Signal)}, nil
}

// GuestInfo asks the guest agent about the guest.
func (s *Server) GuestInfo(ctx context.Context, _ *rpc.Empty) (*rpc.GuestInfoResponse, error) {
	l, err := s.need("guest info")
	if err != nil {
		return nil, err
	}
	ctx, cancel := agentCtx(ctx)
	defer cancel()
	a, err := l.Agent(ctx)
	if err != nil {
		return nil, toStatus("guest info", l, err)
	}
	out := &rpc.GuestInfoResponse{}
	info, err := a.Info(ctx)
	if err != nil {
		return nil, toStatus("guest-info", l, err)
	}
	out.AgentVersion = info.Version
	osi, err := a.OSInfo(ctx)
	if err != nil {
		return nil, toStatus("guest-get-osinfo", l, err)
	}
	out.OsId, out.OsName, out.OsPrettyName, out.OsVersion, out.OsVersionId = osi.ID, osi.Name, osi.PrettyName, osi.Version, osi.VersionID
	out.KernelRelease, out.KernelVersion, out.Machine = osi.KernelRelease, osi.KernelVersion, osi.Machine
	var host struct {
		HostName string `json:"host-name"`
	}
	if err := a.Execute(ctx, "guest-get-host-name", nil, &host); err != nil {
		return nil, toStatus("guest-get-host-name", l, err)
	}
	out.Hostname = host.HostName
	ifaces, err := a.NetworkInterfaces(ctx)
	if err != nil {
		return nil, toStatus("guest-network-get-interfaces", l, err)
	}
	for _, i := range ifaces {
		gi := &rpc.GuestInterface{Name: i.Name, Mac: i.HardwareAddress}
		for _, ip := range i.IPAddresses {
			gi.IpAddresses = append(gi.IpAddresses, fmt.Sprintf("%s/%d", ip.Address, ip.Prefix))
		}
		out.Interfaces = append(out.Interfaces, gi)
	}
	return out, nil
}

// Qmp passes one raw QMP command to QEMU: only read-only ones (ReadOnlyQMP)
// unless the server runs with Options.AllowRawQMP.
func (s *Server) Qmp(ctx context.Context, req *rpc.QmpRequest) (*rpc.QmpResponse, error) {
	cmd := strings.TrimSpace(req.GetCommandJson())
	name, err := CheckRawQMP(cmd, s.opts.AllowRawQMP)
	if err != nil {
		if status.Code(err) == codes.PermissionDenied {
			klog.InfoS("Refused a raw QMP command", "command", name, "flag", "--"+launcherpod.FlagAllowRawQMP)
		}
		return nil, err
	}
	l, err := s.need("qmp")
	if err != nil {
		return nil, err
	}
	reply, err := l.Monitor().RunRaw(ctx, []byte(cmd))
	if err != nil {
		return nil, toStatus("qmp", l, err)
	}
	return &rpc.QmpResponse{ReplyJson: string(reply)}, nil
}

// Migrate starts migrating the guest to the target's sockets; progress
// and outcome are streamed by WatchDomain (Domain.migration).
func (s *Server) Migrate(ctx context.Context, req *rpc.MigrateRequest) (*rpc.Empty, error) {
	l, err := s.need("migrate", launcher.StateRunning, launcher.StatePaused)
	if err != nil {
		return nil, err
	}
	if req.GetMainSocket() == "" {
		return nil, status.Error(codes.InvalidArgument, "migrate: main_socket: empty")
	}
	o := req.GetOptions()
	opts := launcher.MigrationOptions{
		Bandwidth:               o.GetBandwidthBytesPerSecond(),
		DowntimeLimit:           time.Duration(o.GetDowntimeLimitMs()) * time.Millisecond,
		CompletionTimeoutPerGiB: time.Duration(o.GetCompletionTimeoutPerGibSeconds()) * time.Second,
		ProgressTimeout:         time.Duration(o.GetProgressTimeoutSeconds()) * time.Second,
		AllowAutoConverge:       o.GetAllowAutoConverge(),
		AllowPostCopy:           o.GetAllowPostCopy(),
	}
	if opts.Bandwidth < 0 || opts.DowntimeLimit < 0 || opts.CompletionTimeoutPerGiB < 0 || opts.ProgressTimeout < 0 {
		return nil, status.Error(codes.InvalidArgument, "migrate: options: negative values")
	}
	return &rpc.Empty{}, toStatus("migrate", l, l.Migrate(ctx, launcher.MigrationTarget{MainSocket: req.GetMainSocket(), DiskSocket: req.GetDiskSocket(), ControlSocket: req.GetControlSocket()}, opts))
}

// PrepareMigrationTarget starts the VMI as a migration target (paused,
// waiting for the migration) and answers the sockets it listens on.
func (s *Server) PrepareMigrationTarget(ctx context.Context, req *rpc.SyncRequest) (*rpc.PrepareMigrationTargetResponse, error) {
	var at launcher.MigrationTarget
	l, action, err := s.define(ctx, req, func(l *launcher.Launcher, ctx context.Context) error {
		var err error
		at, err = l.StartMigrationTarget(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	if action != ActionStarted {
		return nil, status.Errorf(codes.FailedPrecondition, "prepare migration target: this launcher already runs the VM: %s", l.Domain())
	}
	return &rpc.PrepareMigrationTargetResponse{MainSocket: at.MainSocket, DiskSocket: at.DiskSocket, ControlSocket: at.ControlSocket, Domain: s.domain(l)}, nil
}

// CancelMigration cancels the outgoing migration; the source keeps the guest.
func (s *Server) CancelMigration(ctx context.Context, _ *rpc.Empty) (*rpc.Empty, error) {
	l, err := s.need("cancel migration", launcher.StateMigrating)
	if err != nil {
		return nil, err
	}
	return &rpc.Empty{}, toStatus("cancel migration", l, l.CancelMigration(ctx))
}

// FinalizeMigration ends the source once the target runs the guest.
func (s *Server) FinalizeMigration(ctx context.Context, _ *rpc.Empty) (*rpc.Empty, error) {
	l, err := s.need("finalize migration", launcher.StateMigrating)
	if err != nil {
		return nil, err
	}
	_, err = l.FinalizeMigration(ctx)
	return &rpc.Empty{}, toStatus("finalize migration", l, err)
}
