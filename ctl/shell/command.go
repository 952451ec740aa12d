package shell

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kemu-dev/kemu/ctl/cli"
)

// ThroughPod is kemuctl shell VMI: the shell run in the VMI's launcher Pod.
type ThroughPod struct {
	// Socket is the launcher's socket as the Pod's container sees it.
	Socket string
	// Run runs kemuctl shell --socket Socket in the Pod of the VMI name
	// (in the namespace of the connection flags), with -c commands when
	// batch, and -o json when jsonOut.
	Run func(cmd *cobra.Command, name, commands string, jsonOut, batch bool) error
	// Complete completes the VMI name.
	Complete cobra.CompletionFunc
}

// NewCommand is kemuctl shell; pod runs it through a VMI's launcher Pod.
func NewCommand(pod ThroughPod) *cobra.Command {
	var socket, commands, output string
	var eofHangup bool
	cmd := &cobra.Command{
		Use: "shell (--socket PATH | VMI)",
		Example: `  kemuctl shell --socket /tmp/kemu-run-1234/launcher.sock
  kemuctl shell myvmi -n myns -c 'status; stats'`,
		Short: "Open a debug shell on a launcher's command server",
		Long: `Open a debug shell on a launcher's command server (its unix socket; kemuctl run
prints it as "launcher socket: PATH").

Commands: status, pause, resume, shutdown [grace], kill, reset, stats, migrate-cancel,
agent ping|info, events, console, qmp <command> [json args], help, exit.
With -c the commands (separated by ';') run without a prompt; the exit status is
1 as soon as one fails. -o json prints the responses as JSON (protojson; qmp
replies as QEMU sent them).

kemuctl shell VMI is an administrator's debug tool: it runs the shell in the
VMI's launcher Pod (container compute) through the Kubernetes exec API, so the
user needs create on pods/exec in the VMI's namespace, which kemu's user roles
do not grant (kemuctl console, vnc, pause… go through kemu-api instead) as
  kemuctl shell --socket ` + pod.Socket + `
with -c and -o passed on; stdin, stdout and stderr pass through and the exit
status is the remote shell's (1 when the VMI's launcher cannot be reached).
Without -c on a terminal, the remote shell gets a terminal too (line editing,
completion, Ctrl-C). ` + cli.ConnectionHelp,
		Args: cobra.MaximumNArgs(1),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			if socket != "" || pod.Complete == nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return pod.Complete(cmd, args, toComplete)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			errOut := cmd.ErrOrStderr()
			switch output {
			case "", "text", "json":
			default:
				fmt.Fprintf(errOut, "kemuctl shell: -o %q: want text or json\n", output)
				return cli.ExitError{Code: 2}
			}
			if len(args) == 1 {
				if socket != "" {
					fmt.Fprintln(errOut, "kemuctl shell: give either --socket PATH or a VMI name, not both")
					return cli.ExitError{Code: 2}
				}
				return pod.Run(cmd, args[0], commands, output == "json", cmd.Flags().Changed("command"))
			}
			if socket == "" {
				fmt.Fprintln(errOut, "kemuctl shell: --socket PATH is required")
				return cli.ExitError{Code: 2}
			}
			return runShell(cmd, socket, commands, output == "json", cmd.Flags().Changed("command"), eofHangup)
		},
	}
	cmd.Flags().StringVar(&socket, "socket", "", "the launcher's command socket")
	cmd.Flags().StringVarP(&commands, "command", "c", "", "run these commands (separated by ';') and exit")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	cmd.Flags().BoolVar(&eofHangup, EOFHangupFlag, false, "the end of stdin means the client went away (kemuctl shell VMI passes it with -c commands that read no input, and holds the exec's stdin open)")
	_ = cmd.Flags().MarkHidden(EOFHangupFlag)
	return cmd
}
