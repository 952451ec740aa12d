// Package shell is kemuctl shell: the debug shell on a launcher's command
// server (a prompt with completion and history, or -c commands), its
// commands and the serial console; kemuctl shell VMI runs it in the VMI's
// launcher Pod (ThroughPod).
package shell

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/peterh/liner"
	"github.com/spf13/cobra"
	"golang.org/x/term"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/kemu-dev/kemu/ctl/cli"
	"github.com/kemu-dev/kemu/launcher/rpc"
)

// shellAPIVersion is the launcher command API version kemuctl speaks.
const shellAPIVersion = "v1"

// Prompt is the interactive prompt.
const Prompt = "kemu> "

// usageError is a mistake in what was typed, not an RPC failure.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// errInterrupted is the cause of a command context cancelled by Ctrl-C.
var errInterrupted = errors.New("interrupted")

// shell is one session against a launcher.
type shell struct {
	client rpc.LauncherClient
	in     io.Reader
	out    io.Writer
	errOut io.Writer
	json   bool
	intr   *interrupter

	qmpMu    sync.Mutex
	qmpNames []string // QEMU's command names, once fetched
}

func runShell(cmd *cobra.Command, socket, commands string, jsonOut, batch, eofHangup bool) error {
	errOut := cmd.ErrOrStderr()
	if _, err := os.Stat(socket); err != nil {
		fmt.Fprintf(errOut, "error: launcher socket: %v\n", err)
		return cli.ExitError{Code: 1}
	}
	conn, err := grpc.NewClient("unix:"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintf(errOut, "error: %s\n", formatError(err))
		return cli.ExitError{Code: 1}
	}
	defer conn.Close()
	// The session ends with its client: on a hangup, the running
	// command's streams are cancelled and the connection closed (the
	// launcher sees them end), then the process exits.
	ctx, hangup := hangupContext(cmd.Context())
	stopWatch := watchHangup(cmd.InOrStdin(), cmd.OutOrStdout(), eofHangup, func() {
		hangup()
		_ = conn.Close()
	})
	defer stopWatch()
	s := &shell{
		client: rpc.NewLauncherClient(conn),
		in:     cmd.InOrStdin(),
		out:    cmd.OutOrStdout(),
		errOut: errOut,
		json:   jsonOut,
		intr:   newInterrupter(),
	}
	defer s.intr.stop()

	infoCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	info, err := s.client.Info(infoCtx, &rpc.InfoRequest{SupportedVersions: []string{shellAPIVersion}})
	cancel()
	if err == nil && info.GetVersion() != shellAPIVersion {
		err = fmt.Errorf("the launcher speaks API %q (supports %s), kemuctl speaks %s",
			info.GetVersion(), strings.Join(info.GetSupportedVersions(), ", "), shellAPIVersion)
	}
	if err != nil {
		fmt.Fprintf(errOut, "error: %s\n", formatError(err))
		return cli.ExitError{Code: 1}
	}

	if batch {
		for _, line := range splitCommands(commands) {
			done, err := s.run(ctx, line)
			if errors.Is(context.Cause(ctx), errHangup) {
				return cli.ExitError{Code: HangupExit}
			}
			if err != nil {
				fmt.Fprintf(errOut, "error: %s\n", formatError(err))
				return cli.ExitError{Code: 1}
			}
			if done {
				break
			}
		}
		return nil
	}
	fmt.Fprintf(s.out, "connected to launcher %s (API %s) at %s; type help, or exit\n",
		info.GetLauncherVersion(), info.GetVersion(), socket)
	err = s.interactive(ctx)
	if errors.Is(context.Cause(ctx), errHangup) {
		return cli.ExitError{Code: HangupExit}
	}
	return err
}

// interactive runs the prompt loop until exit, quit or end of input.
func (s *shell) interactive(ctx context.Context) error {
	waitForTerminalSize(os.Stdout, 2*time.Second)
	line := liner.NewLiner()
	defer line.Close()
	line.SetCtrlCAborts(true)
	line.SetTabCompletionStyle(liner.TabCircular)
	line.SetWordCompleter(s.complete)

	history := historyFile()
	if history != "" {
		if f, err := os.Open(history); err == nil {
			_, _ = line.ReadHistory(f)
			f.Close()
		}
	}
	defer func() {
		if history == "" {
			return
		}
		if err := os.MkdirAll(filepath.Dir(history), 0o700); err != nil {
			return
		}
		if f, err := os.OpenFile(history, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600); err == nil {
			_, _ = line.WriteHistory(f)
			f.Close()
		}
	}()

	for {
		text, err := line.Prompt(Prompt)
		if errors.Is(err, liner.ErrPromptAborted) {
			continue
		}
		if errors.Is(err, io.EOF) {
			fmt.Fprintln(s.out)
			return nil
		}
		if err != nil {
			return err
		}
		if strings.TrimSpace(text) != "" {
			line.AppendHistory(text)
		}
		for _, cmdLine := range splitCommands(text) {
			done, err := s.run(ctx, cmdLine)
			if err != nil {
				fmt.Fprintf(s.errOut, "error: %s\n", formatError(err))
				break
			}
			if done {
				return nil
			}
		}
	}
}

// historyFile is where the interactive history is kept ("" if nowhere).
func historyFile() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "kemu", "shell_history")
}

// shellCommand is one command of the shell.
type shellCommand struct {
	name, args, help string
	run              func(s *shell, ctx context.Context, rest string) error
}

// shellCommands lists the commands in the order help (and completion)
// presents them.
func shellCommands() []shellCommand {
	return []shellCommand{
		{"status", "", "the domain: state, reason, QEMU pid and version, accelerator, uptime", (*shell).status},
		{"pause", "", "pause the guest's vCPUs", (*shell).pause},
		{"resume", "", "resume a paused guest", (*shell).resume},
		{"shutdown", "[grace]", "ACPI shutdown, then stop QEMU after grace (seconds or a duration; default: the VMI's)", (*shell).shutdown},
		{"kill", "", "stop QEMU at once", (*shell).kill},
		{"reset", "", "hard-reset the guest", (*shell).reset},
		{"stats", "", "vCPU, block and balloon statistics", (*shell).stats},
		{"migrate-cancel", "", "cancel this source's outgoing migration before the switchover (the guest stays here)", (*shell).migrateCancel},
		{"agent", "ping|info", "talk to the guest agent", (*shell).agent},
		{"events", "", "follow state changes and QMP events until Ctrl-C", (*shell).events},
		{"console", "", "attach the serial console (Ctrl-] leaves)", (*shell).console},
		{"screenshot", "FILE", "save the guest's screen as a PNG (through the launcher's VNC stream)", (*shell).screenshot},
		{"qmp", "<command> [json args]", "send one QMP command, e.g. qmp query-status", (*shell).qmp},
		{"help", "", "this list", (*shell).help},
		{"exit", "", "leave the shell (also quit, Ctrl-D)", nil},
		{"quit", "", "", nil},
	}
}

// run executes one command line; done reports exit or quit.
func (s *shell) run(parent context.Context, line string) (done bool, err error) {
	name, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
	rest = strings.TrimSpace(rest)
	if name == "" {
		return false, nil
	}
	for _, c := range shellCommands() {
		if c.name != name {
			continue
		}
		if c.run == nil {
			return true, nil
		}
		ctx, release := s.intr.context(parent)
		defer release()
		return false, c.run(s, ctx, rest)
	}
	return false, usagef("unknown command %q (try help)", name)
}

func (s *shell) help(_ context.Context, _ string) error {
	for _, c := range shellCommands() {
		if c.help == "" {
			continue
		}
		fmt.Fprintf(s.out, "  %-32s %s\n", strings.TrimSpace(c.name+" "+c.args), c.help)
	}
	return nil
}

// formatError renders an error as the shell prints it: "<code>: <message>"
// for gRPC errors.
func formatError(err error) string {
	var ue usageError
	if errors.As(err, &ue) {
		return ue.msg
	}
	if st, ok := status.FromError(err); ok {
		return fmt.Sprintf("%s: %s", st.Code(), st.Message())
	}
	return err.Error()
}

// splitCommands splits a line at the semicolons that are not inside a JSON
// string, object or array.
func splitCommands(line string) []string {
	var parts []string
	depth, inString, escaped, start := 0, false, false, 0
	for i, r := range line {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case r == '\\':
				escaped = true
			case r == '"':
				inString = false
			}
		case r == '"':
			inString = true
		case r == '{' || r == '[':
			depth++
		case (r == '}' || r == ']') && depth > 0:
			depth--
		case r == ';' && depth == 0:
			parts = append(parts, line[start:i])
			start = i + 1
		}
	}
	parts = append(parts, line[start:])
	var out []string
	for _, p := range parts {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// interrupter turns Ctrl-C (SIGINT) into the cancellation of the running
// command, so that it ends the command, not the shell.
type interrupter struct {
	ch     chan os.Signal
	mu     sync.Mutex
	cancel context.CancelCauseFunc
}

func newInterrupter() *interrupter {
	i := &interrupter{ch: make(chan os.Signal, 1)}
	signal.Notify(i.ch, os.Interrupt)
	go func() {
		for range i.ch {
			i.mu.Lock()
			if i.cancel != nil {
				i.cancel(errInterrupted)
			}
			i.mu.Unlock()
		}
	}()
	return i
}

// context returns the context of one command, cancelled by Ctrl-C until
// release.
func (i *interrupter) context(parent context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	i.mu.Lock()
	i.cancel = cancel
	i.mu.Unlock()
	return ctx, func() {
		i.mu.Lock()
		i.cancel = nil
		i.mu.Unlock()
		cancel(nil)
	}
}

func (i *interrupter) stop() {
	signal.Stop(i.ch)
	close(i.ch)
}

// interrupted reports whether ctx ended by Ctrl-C.
func interrupted(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), errInterrupted)
}

// waitForTerminalSize waits, up to limit, until a terminal on f reports a
// width. Under `kubectl exec -t` the container's terminal starts 0×0 until
// the client's first resize arrives, and liner treats a terminal without
// columns as no terminal at all (no raw mode, no completion, no history).
func waitForTerminalSize(f *os.File, limit time.Duration) {
	if !term.IsTerminal(int(f.Fd())) {
		return
	}
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if w, _, err := term.GetSize(int(f.Fd())); err != nil || w > 0 {
			return
		}
	}
}
