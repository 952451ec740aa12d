// Command kemuctl is kemu's command-line tool: it validates and converts
// manifests, runs VMs without a cluster and drives VMIs in one. This is
// only its wiring: each command lives in a package under ctl/. Installed
// as kubectl-kemu (and kubectl_complete-kemu) on $PATH, it is the kubectl
// plugin kubectl kemu.
package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/kemu-dev/kemu/ctl/cli"
	"github.com/kemu-dev/kemu/ctl/local"
	"github.com/kemu-dev/kemu/ctl/manifests"
	"github.com/kemu-dev/kemu/ctl/shell"
	"github.com/kemu-dev/kemu/ctl/top"
	"github.com/kemu-dev/kemu/ctl/verbs"
)

// newRootCommand is kemuctl presented as name (cli.DisplayName).
func newRootCommand(name string) *cobra.Command {
	c := cli.NewCluster()
	return cli.Root(name, c, append([]*cobra.Command{manifests.NewValidateCommand(), manifests.NewConvertCommand(), manifests.NewExplainCommand(),
		local.NewCommand(), shell.NewCommand(verbs.ShellThroughPod(c)), newVersionCommand(c), top.NewCommand(c)},
		verbs.Commands(c)...)...)
}

func main() {
	root := newRootCommand(cli.DisplayName(os.Args[0]))
	root.SetArgs(cli.PluginArgs(os.Args[0], os.Args[1:]))
	os.Exit(cli.Execute(root, os.Stderr))
}
