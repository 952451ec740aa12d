// Package cli is what kemuctl's commands share: the root command and the
// exit status a command returns without printing anything more.
package cli

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// ExitError carries an exit status without printing anything more.
type ExitError struct{ Code int }

func (e ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// Root is the kemuctl command with cmds under it.
func Root(cmds ...*cobra.Command) *cobra.Command {
	root := &cobra.Command{
		Use:           "kemuctl",
		Short:         "kemuctl runs and manages kemu virtual machines",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(cmds...)
	return root
}

// Execute runs root and returns the process's exit status: an ExitError's,
// else 2 with the error printed on errOut.
func Execute(root *cobra.Command, errOut io.Writer) int {
	err := root.Execute()
	if err == nil {
		return 0
	}
	var ee ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	fmt.Fprintln(errOut, "kemuctl:", err)
	return 2
}
