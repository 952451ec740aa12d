package shell

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kemu-dev/kemu/launcher/cmdserver"
)

// Against a real command server (no VM: the allowlist comes first), a QMP
// command that is not read-only is refused, and the shell says so and why;
// a read-only one passes the allowlist.
func TestShellQMPRefused(t *testing.T) {
	dir, err := os.MkdirTemp("", "kemush-") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	srv := cmdserver.New(cmdserver.Options{SocketsDir: filepath.Join(dir, "s")})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)

	for _, tc := range []struct {
		commands string
		stderr   []string
	}{
		{commands: "qmp stop", stderr: []string{
			`error: qmp stop: refused by the launcher: "stop" is not a read-only command: without --allow-raw-qmp the launcher passes only query-*`,
			"pause, resume, reset, shutdown and kill are shell commands of their own"}},
		{commands: `qmp human-monitor-command {"command-line": "info status"}`, stderr: []string{
			`error: qmp human-monitor-command: refused by the launcher: "human-monitor-command" is not a read-only command`, "--allow-raw-qmp"}},
		// Allowed, but there is no VM behind this server.
		{commands: "qmp query-status", stderr: []string{"error: FailedPrecondition: qmp: no VM yet: Sync first"}},
	} {
		t.Run(tc.commands, func(t *testing.T) {
			_, stderr, code := run(t, "", "shell", "--socket", srv.Socket(), "-c", tc.commands)
			if code != 1 {
				t.Errorf("exit %d, want 1", code)
			}
			for _, want := range tc.stderr {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
			if strings.Contains(stderr, "PermissionDenied") {
				t.Errorf("the refusal is printed as a raw gRPC code:\n%s", stderr)
			}
		})
	}
}
