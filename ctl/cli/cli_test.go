package cli

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/spf13/cobra"
)

// Execute's exit status: 0, a command's ExitError (wrapped or not, nothing
// printed), else 2 with the error printed.
func TestExecute(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		args   []string
		code   int
		errOut string
	}{
		{name: "success", code: 0},
		{name: "exit status", err: ExitError{Code: 3}, code: 3},
		{name: "wrapped exit status", err: fmt.Errorf("run: %w", ExitError{Code: 1}), code: 1},
		{name: "other error", err: errors.New("--output: \"xml\" is not yaml or json"), code: 2,
			errOut: "kemuctl: --output: \"xml\" is not yaml or json\n"},
		{name: "bad arguments", args: []string{"one", "two"}, code: 2,
			errOut: "kemuctl: accepts at most 1 arg(s), received 2\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := &cobra.Command{Use: "x", Args: cobra.MaximumNArgs(1),
				RunE: func(*cobra.Command, []string) error { return tc.err }}
			root := Root(Name, NewCluster(), cmd)
			root.SetArgs(append([]string{"x"}, tc.args...))
			var out, errOut bytes.Buffer
			root.SetOut(&out)
			root.SetErr(&errOut)
			if code := Execute(root, &errOut); code != tc.code || errOut.String() != tc.errOut || out.Len() != 0 {
				t.Errorf("exit %d, stderr %q, stdout %q; want %d, %q", code, errOut.String(), out.String(), tc.code, tc.errOut)
			}
		})
	}
}
