package shell

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/kemu-dev/kemu/api/launcherpod"
	"github.com/kemu-dev/kemu/launcher/rpc"
)

// emit prints a response: as one line of protojson with -o json, else by
// human.
func (s *shell) emit(m proto.Message, human func(w io.Writer)) error {
	if s.json {
		b, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(m)
		if err != nil {
			return err
		}
		// protojson's spacing is deliberately unstable: compact it.
		var buf bytes.Buffer
		if json.Compact(&buf, b) == nil {
			b = buf.Bytes()
		}
		_, err = fmt.Fprintf(s.out, "%s\n", b)
		return err
	}
	human(s.out)
	return nil
}

func noArgs(name, rest string) error {
	if rest != "" {
		return usagef("%s takes no arguments", name)
	}
	return nil
}

func (s *shell) status(ctx context.Context, rest string) error {
	if err := noArgs("status", rest); err != nil {
		return err
	}
	resp, err := s.client.GetDomain(ctx, &rpc.Empty{})
	if err != nil {
		return err
	}
	return s.emit(resp, func(w io.Writer) { printDomain(w, resp.GetDomain()) })
}

func (s *shell) simple(ctx context.Context, name, rest, done string, call func(context.Context, *rpc.Empty) (*rpc.Empty, error)) error {
	if err := noArgs(name, rest); err != nil {
		return err
	}
	resp, err := call(ctx, &rpc.Empty{})
	if err != nil {
		return err
	}
	return s.emit(resp, func(w io.Writer) { fmt.Fprintln(w, done) })
}

func (s *shell) pause(ctx context.Context, rest string) error {
	return s.simple(ctx, "pause", rest, "paused", func(ctx context.Context, e *rpc.Empty) (*rpc.Empty, error) {
		return s.client.Pause(ctx, e)
	})
}

func (s *shell) migrateCancel(ctx context.Context, rest string) error {
	return s.simple(ctx, "migrate-cancel", rest, "migration canceled: the guest runs here", func(ctx context.Context, e *rpc.Empty) (*rpc.Empty, error) {
		return s.client.CancelMigration(ctx, e)
	})
}

func (s *shell) resume(ctx context.Context, rest string) error {
	return s.simple(ctx, "resume", rest, "resumed", func(ctx context.Context, e *rpc.Empty) (*rpc.Empty, error) {
		return s.client.Unpause(ctx, e)
	})
}

func (s *shell) reset(ctx context.Context, rest string) error {
	return s.simple(ctx, "reset", rest, "reset", func(ctx context.Context, e *rpc.Empty) (*rpc.Empty, error) {
		return s.client.Reset(ctx, e)
	})
}

// parseGrace reads a grace period in whole seconds ("30") or as a duration
// ("1m30s").
func parseGrace(arg string) (int64, error) {
	if arg == "" {
		return 0, nil
	}
	if n, err := strconv.ParseInt(arg, 10, 64); err == nil && n >= 0 {
		return n, nil
	}
	if d, err := time.ParseDuration(arg); err == nil && d >= 0 {
		return int64((d + time.Second - 1) / time.Second), nil
	}
	return 0, usagef("shutdown: grace period %q: want seconds or a duration such as 30s", arg)
}

func (s *shell) shutdown(ctx context.Context, rest string) error {
	if len(strings.Fields(rest)) > 1 {
		return usagef("shutdown takes at most one argument, the grace period")
	}
	grace, err := parseGrace(rest)
	if err != nil {
		return err
	}
	resp, err := s.client.Shutdown(ctx, &rpc.ShutdownRequest{GracePeriodSeconds: grace})
	if err != nil {
		return err
	}
	return s.emit(resp, func(w io.Writer) { printDomain(w, resp.GetDomain()) })
}

func (s *shell) kill(ctx context.Context, rest string) error {
	if err := noArgs("kill", rest); err != nil {
		return err
	}
	resp, err := s.client.Kill(ctx, &rpc.Empty{})
	if err != nil {
		return err
	}
	return s.emit(resp, func(w io.Writer) { printDomain(w, resp.GetDomain()) })
}

func (s *shell) stats(ctx context.Context, rest string) error {
	if err := noArgs("stats", rest); err != nil {
		return err
	}
	resp, err := s.client.GetStats(ctx, &rpc.Empty{})
	if err != nil {
		return err
	}
	return s.emit(resp, func(w io.Writer) {
		if resp.GetQemuCpuTimeNanos() > 0 || resp.GetQemuRssBytes() > 0 {
			fmt.Fprintf(w, "qemu: cpu time %s, resident %s\n", time.Duration(resp.GetQemuCpuTimeNanos()), BytesString(resp.GetQemuRssBytes()))
		}
		for _, v := range resp.GetVcpus() {
			fmt.Fprintf(w, "vcpu %d: thread %d, cpu time %s\n", v.GetIndex(), v.GetThreadId(), time.Duration(v.GetCpuTimeNanos()))
		}
		for _, b := range resp.GetBlocks() {
			name := b.GetDevice()
			if b.GetNodeName() != "" {
				name += " (" + b.GetNodeName() + ")"
			}
			fmt.Fprintf(w, "block %s: read %s in %d ops, written %s in %d ops\n", name,
				BytesString(b.GetRdBytes()), b.GetRdOperations(), BytesString(b.GetWrBytes()), b.GetWrOperations())
		}
		if resp.GetBalloonActualBytes() > 0 {
			fmt.Fprintf(w, "balloon: %s\n", BytesString(resp.GetBalloonActualBytes()))
		}
		if n := resp.GetGuestAgentLinesDropped(); n > 0 {
			fmt.Fprintf(w, "guest agent: %d oversize lines dropped (connection reset each time)\n", n)
		}
	})
}

func (s *shell) agent(ctx context.Context, rest string) error {
	switch rest {
	case "ping":
		resp, err := s.client.GuestPing(ctx, &rpc.Empty{})
		if err != nil {
			return err
		}
		return s.emit(resp, func(w io.Writer) { fmt.Fprintln(w, "agent: ok") })
	case "info":
		resp, err := s.client.GuestInfo(ctx, &rpc.Empty{})
		if err != nil {
			return err
		}
		return s.emit(resp, func(w io.Writer) {
			row := func(k, v string) {
				if v != "" {
					fmt.Fprintf(w, "%-10s %s\n", k+":", v)
				}
			}
			row("agent", resp.GetAgentVersion())
			row("hostname", resp.GetHostname())
			os := resp.GetOsPrettyName()
			if os == "" {
				os = strings.TrimSpace(resp.GetOsName() + " " + resp.GetOsVersion())
			}
			row("os", os)
			row("kernel", strings.TrimSpace(resp.GetKernelRelease()+" "+resp.GetMachine()))
			for _, i := range resp.GetInterfaces() {
				fmt.Fprintf(w, "%-10s %s %s %s\n", "interface:", i.GetName(), i.GetMac(), strings.Join(i.GetIpAddresses(), " "))
			}
		})
	default:
		return usagef("usage: agent ping|info")
	}
}

func (s *shell) events(ctx context.Context, rest string) error {
	if err := noArgs("events", rest); err != nil {
		return err
	}
	stream, err := s.client.WatchDomain(ctx, &rpc.WatchRequest{QmpEvents: true})
	if err != nil {
		return err
	}
	if !s.json {
		fmt.Fprintln(s.errOut, "following domain events; Ctrl-C stops")
	}
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			if !s.json {
				fmt.Fprintln(s.errOut, "the launcher ended the event stream")
			}
			return nil
		}
		if err != nil {
			if interrupted(ctx) {
				return nil
			}
			return err
		}
		if err := s.emit(ev, func(w io.Writer) { printEvent(w, ev) }); err != nil {
			return err
		}
	}
}

// qmp sends one QMP command through the launcher.
func (s *shell) qmp(ctx context.Context, rest string) error {
	name, args, _ := strings.Cut(rest, " ")
	args = strings.TrimSpace(args)
	if name == "" {
		return usagef("usage: qmp <command> [json args], e.g. qmp query-status")
	}
	req := struct {
		Execute   string          `json:"execute"`
		Arguments json.RawMessage `json:"arguments,omitempty"`
	}{Execute: name}
	if args != "" {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal([]byte(args), &obj); err != nil {
			return usagef("qmp %s: the arguments must be one JSON object: %v", name, err)
		}
		req.Arguments = json.RawMessage(args)
	}
	cmdJSON, err := json.Marshal(req)
	if err != nil {
		return err
	}
	resp, err := s.client.Qmp(ctx, &rpc.QmpRequest{CommandJson: string(cmdJSON)})
	if st, ok := status.FromError(err); ok && st.Code() == codes.PermissionDenied {
		return usagef("qmp %s: refused by the launcher: %s\n"+
			"  (pause, resume, reset, shutdown and kill are shell commands of their own; only a launcher started with --%s, as kemu-launcher or kemuctl run, passes any QMP command)",
			name, st.Message(), launcherpod.FlagAllowRawQMP)
	}
	if err != nil {
		return err
	}
	var reply struct {
		Return json.RawMessage `json:"return"`
		Error  *struct {
			Class string `json:"class"`
			Desc  string `json:"desc"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(resp.GetReplyJson()), &reply); err != nil {
		return fmt.Errorf("qmp %s: the launcher's reply is not JSON: %v", name, err)
	}
	if s.json {
		var buf bytes.Buffer
		if err := json.Compact(&buf, []byte(resp.GetReplyJson())); err != nil {
			return err
		}
		fmt.Fprintf(s.out, "%s\n", buf.Bytes())
	}
	if reply.Error != nil {
		return fmt.Errorf("qmp %s: %s: %s", name, reply.Error.Class, reply.Error.Desc)
	}
	if s.json {
		return nil
	}
	ret := bytes.TrimSpace(reply.Return)
	if len(ret) == 0 || string(ret) == "{}" {
		fmt.Fprintln(s.out, "ok")
		return nil
	}
	var text string
	if json.Unmarshal(ret, &text) == nil { // human-monitor-command's output
		fmt.Fprint(s.out, text)
		if !strings.HasSuffix(text, "\n") {
			fmt.Fprintln(s.out)
		}
		return nil
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, ret, "", "  "); err != nil {
		return err
	}
	fmt.Fprintf(s.out, "%s\n", buf.Bytes())
	return nil
}

// qmpCommandNames returns QEMU's command names (query-commands through the
// Qmp RPC), fetched once.
func (s *shell) qmpCommandNames(ctx context.Context) []string {
	s.qmpMu.Lock()
	defer s.qmpMu.Unlock()
	if s.qmpNames != nil {
		return s.qmpNames
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := s.client.Qmp(ctx, &rpc.QmpRequest{CommandJson: `{"execute":"query-commands"}`})
	if err != nil {
		return nil
	}
	var reply struct {
		Return []struct {
			Name string `json:"name"`
		} `json:"return"`
	}
	if json.Unmarshal([]byte(resp.GetReplyJson()), &reply) != nil {
		return nil
	}
	names := make([]string, 0, len(reply.Return))
	for _, c := range reply.Return {
		names = append(names, c.Name)
	}
	sort.Strings(names)
	s.qmpNames = names
	return names
}

// complete is the line editor's completer: the shell's commands, agent's
// subcommands, and QEMU's command names after qmp.
func (s *shell) complete(line string, pos int) (head string, completions []string, tail string) {
	if pos > len(line) {
		pos = len(line)
	}
	before, tail := line[:pos], line[pos:]
	segStart := strings.LastIndex(before, ";") + 1
	seg := before[segStart:]
	wordStart := strings.LastIndexAny(seg, " \t") + 1
	word := seg[wordStart:]
	head = before[:segStart+wordStart]
	fields := strings.Fields(seg[:wordStart])

	var candidates []string
	switch {
	case len(fields) == 0, len(fields) == 1 && fields[0] == "help":
		for _, c := range shellCommands() {
			candidates = append(candidates, c.name)
		}
	case len(fields) == 1 && fields[0] == "agent":
		candidates = []string{"ping", "info"}
	case len(fields) == 1 && fields[0] == "qmp":
		candidates = s.qmpCommandNames(context.Background())
	}
	for _, c := range candidates {
		if strings.HasPrefix(c, word) {
			completions = append(completions, c+" ")
		}
	}
	return head, completions, tail
}

func printDomain(w io.Writer, d *rpc.Domain) {
	if d == nil {
		fmt.Fprintln(w, "no domain")
		return
	}
	row := func(k, format string, args ...any) {
		fmt.Fprintf(w, "%-9s "+format+"\n", append([]any{k + ":"}, args...)...)
	}
	state := d.GetState().String()
	if d.GetReason() != rpc.DomainReason_DOMAIN_REASON_UNSPECIFIED {
		state += " (" + d.GetReason().String() + ")"
	}
	row("state", "%s", state)
	if d.GetMessage() != "" {
		row("message", "%s", d.GetMessage())
	}
	var qemu []string
	if d.GetQemuPid() != 0 {
		qemu = append(qemu, fmt.Sprintf("pid %d", d.GetQemuPid()))
	}
	if d.GetQemuVersion() != "" {
		qemu = append(qemu, "version "+d.GetQemuVersion())
	}
	if d.GetAccelerator() != "" {
		qemu = append(qemu, "accelerator "+d.GetAccelerator())
	}
	if len(qemu) > 0 {
		row("qemu", "%s", strings.Join(qemu, ", "))
	}
	if d.GetExited() {
		row("exited", "status %d", d.GetExitCode())
	} else if d.GetStartedUnixNano() > 0 {
		row("uptime", "%s", time.Since(time.Unix(0, d.GetStartedUnixNano())).Round(time.Second))
	}
	if d.GetAgentConnected() {
		row("agent", "connected")
	} else {
		row("agent", "not connected")
	}
	if d.GetSinceUnixNano() > 0 {
		row("since", "%s", time.Unix(0, d.GetSinceUnixNano()).Format(time.RFC3339))
	}
	if d.GetVmiUid() != "" {
		row("vmi uid", "%s", d.GetVmiUid())
	}
	if d.GetDeviceCgroup() != "" {
		row("cgroup", "%s", d.GetDeviceCgroup())
	} else if d.GetQemuPid() != 0 {
		row("cgroup", "none: QEMU runs without its device allowlist")
	}
	if d.GetSelinuxContext() != "" {
		row("selinux", "%s", d.GetSelinuxContext())
	}
	for _, i := range d.GetInterfaces() {
		desc := i.GetName() + " " + i.GetMac() + " at " + strings.Join(i.GetIpAddresses(), ",")
		if i.GetGuestIp() != "" {
			desc += " (guest " + i.GetGuestIp() + ")"
		}
		if i.GetQueues() > 1 {
			desc += fmt.Sprintf(", %d queues", i.GetQueues())
		}
		row("nic", "%s", desc)
	}
	if m := d.GetMigration(); m != nil {
		row("migration", "%s", migrationSummary(m))
	}
	row("seq", "%d", d.GetSeq())
}

// migrationSummary is one line of a migration's progress or outcome: role,
// status, mode, RAM moved, disks mirrored, times.
func migrationSummary(m *rpc.MigrationState) string {
	parts := []string{strings.ToLower(m.GetRole().String()), m.GetStatus()}
	if m.GetMode() == rpc.MigrationMode_PostCopy {
		parts = append(parts, "post-copy")
	}
	if t := m.GetBytesTotal(); t > 0 {
		ram := fmt.Sprintf("RAM %s sent of %s, %s left", BytesString(m.GetBytesTransferred()), BytesString(t), BytesString(m.GetBytesRemaining()))
		if p := m.GetPasses(); p > 0 {
			ram += fmt.Sprintf(", %d passes", p)
		}
		if r := m.GetDirtyPagesRate(); r > 0 {
			ram += fmt.Sprintf(", %d dirty pages/s", r)
		}
		parts = append(parts, ram)
	}
	if t := m.GetDiskBytesTotal(); t > 0 {
		parts = append(parts, fmt.Sprintf("disks %s of %s", BytesString(m.GetDiskBytesCopied()), BytesString(t)))
	}
	var times []string
	for _, t := range []struct {
		name string
		ms   int64
	}{{"total", m.GetTotalMs()}, {"setup", m.GetSetupMs()}, {"downtime", m.GetDowntimeMs()}} {
		if t.ms > 0 {
			times = append(times, fmt.Sprintf("%s %s", t.name, time.Duration(t.ms)*time.Millisecond))
		}
	}
	if len(times) == 0 && m.GetStartedUnixNano() > 0 {
		times = append(times, "running for "+time.Since(time.Unix(0, m.GetStartedUnixNano())).Round(100*time.Millisecond).String())
	}
	if len(times) > 0 {
		parts = append(parts, strings.Join(times, ", "))
	}
	if m.GetMessage() != "" {
		parts = append(parts, m.GetMessage())
	}
	return strings.Join(parts, "; ")
}

func printEvent(w io.Writer, ev *rpc.WatchEvent) {
	stamp := func(ns int64) string {
		if ns == 0 {
			return "-"
		}
		return time.Unix(0, ns).Format("15:04:05.000")
	}
	switch {
	case ev.GetDomain() != nil:
		d := ev.GetDomain()
		state := d.GetState().String()
		if d.GetReason() != rpc.DomainReason_DOMAIN_REASON_UNSPECIFIED {
			state += " (" + d.GetReason().String() + ")"
		}
		if d.GetMessage() != "" {
			state += ": " + d.GetMessage()
		}
		fmt.Fprintf(w, "%s domain %s [seq %d]\n", stamp(d.GetSinceUnixNano()), state, d.GetSeq())
		if m := d.GetMigration(); m != nil {
			fmt.Fprintf(w, "%s migration %s\n", stamp(d.GetSinceUnixNano()), migrationSummary(m))
		}
	case ev.GetQmpEvent() != nil:
		q := ev.GetQmpEvent()
		data := q.GetDataJson()
		if data == "" || data == "{}" {
			data = ""
		}
		fmt.Fprintln(w, strings.TrimSpace(fmt.Sprintf("%s qmp %s %s", stamp(q.GetTimestampUnixNano()), q.GetName(), data)))
	}
}

// BytesString is n bytes in binary units (1.5 MiB).
func BytesString(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// isCanceled reports a gRPC or context cancellation.
func isCanceled(err error) bool {
	return errors.Is(err, context.Canceled) || status.Code(err) == codes.Canceled
}
