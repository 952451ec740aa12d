// Command kemuctl is kemu's command-line tool: it validates and converts
// manifests, and (as kemu grows) runs VMs without a cluster and drives VMIs
// in one.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// exitError carries an exit status without printing anything more.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "kemuctl",
		Short:         "kemuctl runs and manages kemu virtual machines",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newValidateCommand(), newConvertCommand(), newRunCommand(), newShellCommand(), newVersionCommand(),
		newStartCommand(), newStopCommand(), newRestartCommand(),
		newPauseCommand(), newUnpauseCommand(), newSoftRebootCommand(), newConsoleCommand())
	return root
}

func main() {
	if err := newRootCommand().Execute(); err != nil {
		var ee exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		fmt.Fprintln(os.Stderr, "kemuctl:", err)
		os.Exit(2)
	}
}
