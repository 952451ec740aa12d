package main

import (
	"testing"

	"github.com/kemu-dev/kemu/ctl/cli/clitest"
)

// run executes kemuctl with args and stdin, returning stdout, stderr and the
// exit status main would use.
func run(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	return clitest.Run(t, newRootCommand(), stdin, args...)
}
