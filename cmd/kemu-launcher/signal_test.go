package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/kemu-dev/kemu/api/launcherpod"
	"github.com/kemu-dev/kemu/launcher/rpc"
)

// launcherProc is a kemu-launcher process and its log.
type launcherProc struct {
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	socket string
}

// startLauncher runs bin with args and waits for its socket to be ready.
func startLauncher(t *testing.T, ctx context.Context, bin, sockets string, args ...string) *launcherProc {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--sockets-dir", sockets}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &launcherProc{cmd: cmd, stderr: &stderr, socket: filepath.Join(sockets, launcherpod.Socket)}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("launcher log:\n%s", stderr.String())
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, err := os.Stat(p.socket); err == nil {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 30 s", p.socket)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// exitCode waits for the process and returns its exit status.
func (p *launcherProc) exitCode(t *testing.T) int {
	t.Helper()
	err := p.cmd.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee) && ee.Exited():
		return ee.ExitCode()
	}
	t.Fatalf("launcher: %v", err)
	return -1
}

// SIGTERM before any VM started is not a success: exit 3, so that a VM
// with runStrategy RerunOnFailure starts it again; the socket is gone.
func TestSIGTERMBeforeAnyVM(t *testing.T) {
	bin := buildLauncher(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := shortDir(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			p := startLauncher(t, ctx, bin, filepath.Join(dir, "s"), "--runtime-dir", filepath.Join(dir, "run"))
			if err := p.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if code := p.exitCode(t); code != 3 {
				t.Errorf("exit status %d after %s before any VM, want 3", code, sig)
			}
			if !strings.Contains(p.stderr.String(), "Signal before the VM started; not starting it") {
				t.Errorf("log:\n%s", p.stderr.String())
			}
			if _, err := os.Stat(p.socket); !os.IsNotExist(err) {
				t.Errorf("socket left: %v", err)
			}
		})
	}
}

// --allow-raw-qmp reaches the command server: without it a command that
// is not read-only is refused at once, with it the same command gets as far
// as the missing VM.
func TestAllowRawQMPFlag(t *testing.T) {
	bin := buildLauncher(t)
	for _, allow := range []bool{false, true} {
		dir := shortDir(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		args := []string{"--runtime-dir", filepath.Join(dir, "run")}
		if allow {
			args = append(args, "--"+launcherpod.FlagAllowRawQMP)
		}
		p := startLauncher(t, ctx, bin, filepath.Join(dir, "s"), args...)
		conn, err := grpc.NewClient("unix://"+p.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		_, err = rpc.NewLauncherClient(conn).Qmp(ctx, &rpc.QmpRequest{CommandJson: `{"execute":"system_reset"}`})
		conn.Close()
		want, msg := codes.PermissionDenied, "--allow-raw-qmp"
		if allow {
			want, msg = codes.FailedPrecondition, "Sync first"
		}
		if status.Code(err) != want || !strings.Contains(status.Convert(err).Message(), msg) {
			t.Errorf("allow-raw-qmp=%v: qmp system_reset: %v, want %s (%q)", allow, err, want, msg)
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		p.exitCode(t)
	}
}
