package main

import (
	"strings"
	"testing"

	"github.com/kemu-dev/kemu/ctl/cli"
	"github.com/kemu-dev/kemu/ctl/cli/clitest"
)

// run executes kemuctl with args and stdin, returning stdout, stderr and the
// exit status main would use.
func run(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	return clitest.Run(t, newRootCommand(cli.Name), stdin, args...)
}

// kemuctl shell VMI goes through the VMI's launcher Pod: it needs a cluster.
func TestShellByName(t *testing.T) {
	_, stderr, code := run(t, "", "shell", "myvm", "--kubeconfig", "/nonexistent/kubeconfig")
	if code != 1 || !strings.Contains(stderr, "kemuctl shell: kubeconfig: ") {
		t.Errorf("exit %d (want 1), stderr %q (want %q)", code, stderr, "kemuctl shell: kubeconfig: ")
	}
}
