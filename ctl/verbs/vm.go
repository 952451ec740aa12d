// Package verbs is kemuctl's verbs on a cluster, calls of kemu-api's
// aggregated API (api/subresources, through ctl/apiclient): start, stop
// and restart a VirtualMachine; pause, unpause, soft-reboot and migrate a
// VirtualMachineInstance (and wait for it); console and vnc, its streams.
// migrate-cancel deletes the migration object; shell VMI, an
// administrator's debug tool, runs in the VMI's launcher Pod through the
// Kubernetes exec API.
package verbs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/kemu-dev/kemu/api/subresources"
	"github.com/kemu-dev/kemu/ctl/apiclient"
	"github.com/kemu-dev/kemu/ctl/cli"
)

// vmOpTimeout bounds one request to kemu-api (and a few API reads).
const vmOpTimeout = 30 * time.Second

// vmConflictRetries is how often a VM verb is sent again when kemu-api's
// write lost a race with the VM controller (kemu-api decides again on the
// VM as it is then).
const vmConflictRetries = 4

// vmVerb is one of start, stop, restart.
type vmVerb struct {
	verb  subresources.Verb
	use   string // the command: start, stop, restart
	short string
	long  string
	body  any // the request's options
}

// NewStartCommand is kemuctl start.
func NewStartCommand(c *cli.Cluster) *cobra.Command {
	return newVMCommand(c, vmVerb{verb: subresources.Start, use: "start", short: "Start a VirtualMachine",
		body: subresources.StartOptions{},
		long: `start asks the VM controller to start the VM's VMI:
runStrategy Halted becomes Always; Manual and RerunOnFailure get a Start request
(a Manual VM whose VMI ended is restarted). A VM with runStrategy Always or Once
is started by the controller itself, so start refuses it, as it refuses a VM
that runs already.`})
}

// NewStopCommand is kemuctl stop.
func NewStopCommand(c *cli.Cluster) *cobra.Command {
	return newVMCommand(c, vmVerb{verb: subresources.Stop, use: "stop", short: "Stop a VirtualMachine",
		body: subresources.StopOptions{},
		long: `stop stops the VM's VMI: runStrategy Always, RerunOnFailure and Once become
Halted (the controller deletes the VMI, which powers the guest off within its
terminationGracePeriodSeconds); for Manual the VMI is deleted directly and the
VM stays Manual.`})
}

// NewRestartCommand is kemuctl restart.
func NewRestartCommand(c *cli.Cluster) *cobra.Command {
	return newVMCommand(c, vmVerb{verb: subresources.Restart, use: "restart", short: "Restart a VirtualMachine",
		body: subresources.RestartOptions{},
		long: `restart replaces a running VM's VMI by a new one: it queues a Stop of the
current VMI and a Start, then deletes the VMI; the VM controller creates the new
one once the old one is gone. For runStrategy Always, RerunOnFailure and Manual;
a Halted VM is started with kemuctl start, and Once runs only once.`})
}

func newVMCommand(c *cli.Cluster, v vmVerb) *cobra.Command {
	return &cobra.Command{
		Use:     v.use + " VM",
		Short:   v.short,
		Example: "  kemuctl " + v.use + " myvm -n myns",
		Long: v.long + `

kemuctl calls kemu-api's ` + v.verb.Name + ` subresource of the VM (the user needs ` + v.verb.RBACVerb() + ` on
` + v.verb.Subresource() + ` in ` + subresources.Group + `); kemu-api checks the VM's
state and makes the change with its own ServiceAccount.

` + cli.ConnectionHelp + `
The exit status is 1 when kemu-api refuses to ` + v.use + ` the VM (or the cluster is not
reached), 2 for a usage error.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: c.CompleteVMs,
		RunE: func(cmd *cobra.Command, args []string) error {
			errOut := cmd.ErrOrStderr()
			cl, err := c.Clients()
			var api *apiclient.Client
			if err == nil {
				api, err = apiclient.New(cl.Config)
			}
			if err != nil {
				fmt.Fprintf(errOut, "kemuctl %s: %v\n", v.use, err)
				return cli.ExitError{Code: 1}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), vmOpTimeout)
			defer cancel()
			msg, err := v.run(ctx, api, cl.Namespace, args[0])
			if err != nil {
				fmt.Fprintf(errOut, "kemuctl %s: %v\n", v.use, err)
				return cli.ExitError{Code: 1}
			}
			fmt.Fprintln(cmd.OutOrStdout(), msg)
			return nil
		},
	}
}

// putter calls a PUT verb (apiclient.Client).
type putter interface {
	Put(ctx context.Context, verb subresources.Verb, namespace, name string, opts any) ([]byte, error)
}

// run sends the verb, again when kemu-api lost a race with the VM
// controller; it returns what to tell the user.
func (v vmVerb) run(ctx context.Context, api putter, ns, name string) (string, error) {
	var err error
	for attempt := 0; attempt <= vmConflictRetries; attempt++ {
		_, err = api.Put(ctx, v.verb, ns, name, v.body)
		if err == nil {
			return fmt.Sprintf("VM %s/%s was scheduled to %s", ns, name, v.use), nil
		}
		err = requestError("VM", subresources.VMs, ns, name, err)
		if !errors.As(err, new(conflictError)) {
			return "", err
		}
	}
	return "", err
}
