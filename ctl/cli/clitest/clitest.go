// Package clitest runs kemuctl's commands in tests: in the test process
// (Run), or as a process on a pseudo-terminal (the test binary as main).
package clitest

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/kemu-dev/kemu/ctl/cli"
	"github.com/kemu-dev/kemu/test/testguest"
)

// Run executes root with args and stdin, returning stdout, stderr and the
// exit status main would use.
func Run(t *testing.T, root *cobra.Command, stdin string, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	root.SetArgs(args)
	root.SetIn(strings.NewReader(stdin))
	root.SetOut(&out)
	root.SetErr(&errOut)
	code := 0
	if err := root.Execute(); err != nil {
		var ee cli.ExitError
		if errors.As(err, &ee) {
			code = ee.Code
		} else {
			errOut.WriteString(err.Error())
			code = 2
		}
	}
	return out.String(), errOut.String(), code
}

// AsMainEnv makes the test binary run kemuctl's main instead of the tests,
// so that a test can start kemuctl as a process (on a pseudo-terminal).
const AsMainEnv = "KEMUCTL_TEST_AS_MAIN"

// Main is a TestMain: with AsMainEnv=1 it runs root as kemuctl's main,
// else the tests.
func Main(m *testing.M, root func() *cobra.Command) {
	if os.Getenv(AsMainEnv) == "1" {
		os.Exit(cli.Execute(root(), os.Stderr))
	}
	os.Exit(m.Run())
}

// Screen collects what a pseudo-terminal shows.
type Screen = testguest.SyncBuffer

// WaitFor polls until cond holds, failing the test after limit.
func WaitFor(t *testing.T, what string, limit time.Duration, sc *Screen, cond func(out string) bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond(sc.String()) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; the terminal shows:\n%q", what, sc.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// CopyAll copies what src yields onto dst until src fails.
func CopyAll(dst *Screen, src *os.File) (int64, error) {
	buf := make([]byte, 4096)
	var n int64
	for {
		m, err := src.Read(buf)
		if m > 0 {
			_, _ = dst.Write(buf[:m])
			n += int64(m)
		}
		if err != nil {
			return n, err
		}
	}
}
