// Package cli is what kemuctl's commands share: the root command, its
// name (kemuctl, or kubectl kemu as a kubectl plugin), the connection to
// the cluster (kubectl's flags, Cluster) and its completions, and the exit
// status a command returns without printing anything more.
package cli

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
)

// Names kemuctl goes by: its own, and as a kubectl plugin (installed as
// kubectl-kemu on $PATH, run as kubectl kemu). kubectl completes a
// plugin's arguments by running kubectl_complete-kemu.
const (
	Name             = "kemuctl"
	PluginExecutable = "kubectl-kemu"
	PluginName       = "kubectl kemu"
	PluginComplete   = "kubectl_complete-kemu"
)

// DisplayName is how kemuctl presents itself when run as argv0: "kubectl
// kemu" as the plugin (or its completion helper), else "kemuctl".
func DisplayName(argv0 string) string {
	switch filepath.Base(argv0) {
	case PluginExecutable, PluginComplete:
		return PluginName
	}
	return Name
}

// PluginArgs are the arguments to run kemuctl with when started as argv0
// with args: kubectl runs kubectl_complete-kemu with the words to
// complete, which is cobra's __complete.
func PluginArgs(argv0 string, args []string) []string {
	if filepath.Base(argv0) == PluginComplete {
		return append([]string{cobra.ShellCompRequestCmd}, args...)
	}
	return args
}

// ExitError carries an exit status without printing anything more.
type ExitError struct{ Code int }

func (e ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// Root is the kemuctl command with cmds under it, presented as name
// (DisplayName), with the connection flags of c on every command and
// cobra's completion command. Examples are written with "kemuctl "; they
// say name instead.
func Root(name string, c *Cluster, cmds ...*cobra.Command) *cobra.Command {
	root := &cobra.Command{
		Use:           Name,
		Short:         name + " runs and manages kemu virtual machines",
		SilenceUsage:  true,
		SilenceErrors: true,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: name},
	}
	c.AddFlags(root.PersistentFlags())
	c.registerFlagCompletions(root)
	root.AddCommand(cmds...)
	if name != Name {
		renameExamples(root, name)
	}
	return root
}

// renameExamples makes the examples of cmd and its subcommands say name.
func renameExamples(cmd *cobra.Command, name string) {
	cmd.Example = strings.ReplaceAll(cmd.Example, Name+" ", name+" ")
	for _, sub := range cmd.Commands() {
		renameExamples(sub, name)
	}
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
