// Command kemuctl is kemu's command-line tool: it validates and converts
// manifests, runs VMs without a cluster and drives VMIs in one. This is
// only its wiring: each command lives in a package under ctl/.
package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/kemu-dev/kemu/ctl/cli"
	"github.com/kemu-dev/kemu/ctl/local"
	"github.com/kemu-dev/kemu/ctl/manifests"
	"github.com/kemu-dev/kemu/ctl/shell"
	"github.com/kemu-dev/kemu/ctl/verbs"
)

func newRootCommand() *cobra.Command {
	return cli.Root(append([]*cobra.Command{manifests.NewValidateCommand(), manifests.NewConvertCommand(),
		local.NewCommand(), shell.NewCommand(verbs.ShellThroughPod()), newVersionCommand()},
		verbs.Commands()...)...)
}

func main() { os.Exit(cli.Execute(newRootCommand(), os.Stderr)) }
