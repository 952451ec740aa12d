// Package top is kemuctl top: kemuctl top vmi prints the running VMIs'
// resource use as kubectl top pod prints Pods' — vCPU %, guest memory,
// network and disk rates — from two samples of kemu-api's stats
// subresource (api/subresources.VirtualMachineInstanceStats, the node
// agents' figures of the launchers' GetStats) a window apart.
package top

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kemu-dev/kemu/api/subresources"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/ctl/apiclient"
	"github.com/kemu-dev/kemu/ctl/cli"
	"github.com/kemu-dev/kemu/ctl/verbs"
)

// Defaults and limits of kemuctl top vmi.
const (
	// DefaultWindow is --window's default: the time between a VMI's two
	// samples.
	DefaultWindow = 2 * time.Second
	// MaxWindow bounds --window.
	MaxWindow = 10 * time.Minute
	// callTimeout bounds one stats call (kemu-api's own bound of the node
	// agent's answer is 30 s).
	callTimeout = 30 * time.Second
	// listTimeout bounds reading the VMIs.
	listTimeout = 30 * time.Second
	// parallel is how many stats calls kemuctl has open at once.
	parallel = 8
)

// NewCommand is kemuctl top with its resource commands.
func NewCommand(c *cli.Cluster) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Display resource use of VirtualMachineInstances",
		Long: `top shows what running VMs use, as kubectl top shows Pods.

Available resources: vmi.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newVMICommand(c))
	return cmd
}

type vmiOptions struct {
	allNamespaces bool
	noHeaders     bool
	sortBy        string
	window        time.Duration
}

func newVMICommand(c *cli.Cluster) *cobra.Command {
	var o vmiOptions
	cmd := &cobra.Command{
		Use:     "vmi [NAME...]",
		Aliases: []string{"vmis", "virtualmachineinstance", "virtualmachineinstances"},
		Short:   "Display vCPU, memory, network and disk use of running VirtualMachineInstances",
		Example: `  kemuctl top vmi -n myns
  kemuctl top vmi -A --sort-by=cpu
  kemuctl top vmi myvmi --window=5s`,
		Long: `top vmi samples each running VMI twice, --window apart, and prints per VMI:

  CPU(%)              the vCPUs' busy share over the window (their CPU time on the
                      node, per vCPU: 100% is every vCPU always busy)
  MEMORY(used/total)  the guest's used and total memory as its balloon driver
                      reports them (used is total less free, page cache included);
                      "-" without a balloon (autoattachMemBalloon: false), before
                      the driver's first report or when the guest has no driver
  NET RX/s, NET TX/s  bytes per second the guest received and sent on its
                      pod-network interfaces
  DISK READ/s, DISK WRITE/s
                      bytes per second read from and written to its disks

The figures come from kemu-api's stats subresource,

  GET ` + subresources.StatsVerb.Path("NS", "NAME") + `

(the user needs get on ` + subresources.StatsVerb.Subresource() + ` in ` + subresources.Group + `,
which kemu.dev:view grants): kemu-api asks the node agent of the VMI's node,
which asks the VMI's launcher. No metrics server or Prometheus is involved.

VMIs that are not Running are skipped (their number is said on stderr). A VMI
whose figures cannot be read is reported on stderr and left out; the exit
status is 1 only when no VMI could be measured.

` + cli.ConnectionHelp,
		ValidArgsFunction: c.CompleteVMIs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runVMI(cmd.Context(), c, o, args, cmd.OutOrStdout(), prefixed(cmd.ErrOrStderr(), cmd.CommandPath()))
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "the VMIs of every namespace (the -n flag is ignored)")
	f.BoolVar(&o.noHeaders, "no-headers", false, "print no header line")
	f.StringVar(&o.sortBy, "sort-by", "", "sort by "+SortCPU+" or "+SortMemory+" (the largest first); default: namespace and name")
	f.DurationVar(&o.window, "window", DefaultWindow, "time between a VMI's two samples")
	_ = cmd.RegisterFlagCompletionFunc("sort-by", cobra.FixedCompletions([]cobra.Completion{SortCPU, SortMemory}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func (o vmiOptions) validate(names []string) error {
	if o.sortBy != "" && o.sortBy != SortCPU && o.sortBy != SortMemory {
		return fmt.Errorf("--sort-by=%q: want %s or %s", o.sortBy, SortCPU, SortMemory)
	}
	if o.window <= 0 || o.window > MaxWindow {
		return fmt.Errorf("--window=%s: want more than 0 and at most %s", o.window, MaxWindow)
	}
	if o.allNamespaces && len(names) > 0 {
		return errors.New("a VMI cannot be named across all namespaces (drop -A, name its namespace with -n)")
	}
	return nil
}

// report is where a command says what it left out: a line after its name.
type report func(format string, a ...any)

func prefixed(w io.Writer, name string) report {
	return func(format string, a ...any) { fmt.Fprintf(w, name+": "+format+"\n", a...) }
}

func runVMI(ctx context.Context, c *cli.Cluster, o vmiOptions, names []string, out io.Writer, say report) error {
	if err := o.validate(names); err != nil {
		return err
	}
	cl, err := c.Clients()
	if err != nil {
		return err
	}
	api, err := apiclient.New(cl.Config)
	if err != nil {
		return err
	}
	ns := cl.Namespace
	if o.allNamespaces {
		ns = metav1.NamespaceAll
	}
	vmis, failed, err := readVMIs(ctx, cl, ns, names, say)
	if err != nil {
		return err
	}
	running := vmis[:0]
	for _, vmi := range vmis {
		if vmi.Status.Phase == v1.Running && vmi.DeletionTimestamp == nil {
			running = append(running, vmi)
		}
	}
	if skipped := len(vmis) - len(running); skipped > 0 {
		say("%d VMI(s) not Running skipped", skipped)
	}
	if len(running) == 0 {
		if failed > 0 { // every named VMI unreadable
			return cli.ExitError{Code: 1}
		}
		if len(vmis) == 0 {
			say("%s", noneFound(ns))
		}
		return nil
	}
	get := func(ctx context.Context, ns, name string) (*subresources.VirtualMachineInstanceStats, error) {
		var st subresources.VirtualMachineInstanceStats
		return &st, api.Get(ctx, subresources.StatsVerb, ns, name, &st)
	}
	var rows []Row
	for i, r := range sampleAll(ctx, running, get, o.window, callTimeout, parallel) {
		if r.err != nil {
			vmi := running[i]
			say("%v", verbs.RequestError("VMI", subresources.VMIs, vmi.Namespace, vmi.Name, r.err))
			failed++
			continue
		}
		rows = append(rows, r.row)
	}
	if len(rows) == 0 {
		return cli.ExitError{Code: 1}
	}
	SortRows(rows, o.sortBy)
	return PrintTable(out, rows, o.allNamespaces, o.noHeaders)
}

// readVMIs lists the VMIs of ns ("": all), or gets the named ones (a name
// that cannot be read is reported and counted in failed).
func readVMIs(ctx context.Context, cl *cli.Clients, ns string, names []string, say report) (vmis []*v1.VirtualMachineInstance, failed int, err error) {
	ctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	api := cl.Kemu.KemuV1alpha1().VirtualMachineInstances(ns)
	if len(names) == 0 {
		list, err := api.List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, 0, fmt.Errorf("listing VMIs: %w", err)
		}
		for i := range list.Items {
			vmis = append(vmis, &list.Items[i])
		}
		return vmis, 0, nil
	}
	for _, name := range names {
		vmi, err := api.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			say("%v", verbs.RequestError("VMI", subresources.VMIs, ns, name, err))
			failed++
			continue
		}
		vmis = append(vmis, vmi)
	}
	return vmis, failed, nil
}

// noneFound says there is no VMI, as kubectl does.
func noneFound(ns string) string {
	if ns == metav1.NamespaceAll {
		return "No VMIs found."
	}
	return "No VMIs found in " + ns + " namespace."
}
