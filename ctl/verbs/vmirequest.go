package verbs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	"github.com/kemu-dev/kemu/api/subresources"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/ctl/apiclient"
	"github.com/kemu-dev/kemu/ctl/cli"
	"github.com/kemu-dev/kemu/kube/vmistatus"
)

// Defaults of pause, unpause and soft-reboot.
const (
	// vmiWaitTimeout is --timeout's default: how long to wait for the node
	// agent to report the request done.
	vmiWaitTimeout = time.Minute
	// vmiPollInterval is how often the VMI is read while waiting.
	vmiPollInterval = 250 * time.Millisecond
)

// vmiRequest is one of the requests a user makes of a running VMI through
// kemu-api's subresources, carried out by the node agent on the VMI's node.
type vmiRequest struct {
	verb  string // the command: pause, unpause, soft-reboot
	sub   subresources.Verb
	body  any // the request's options
	short string
	long  string
	// pending and done complete "VMI ns/name was scheduled to <pending>"
	// and "VMI ns/name was <done>".
	pending, done string
	// doneFor returns the test of the request being done, given the VMI
	// as read once kemu-api accepted the request.
	doneFor func(vmi *v1.VirtualMachineInstance) (vmiDoneFunc, error)
}

// vmiDoneFunc says whether the request is done, else describes what the VMI
// reports instead (for the timeout message).
type vmiDoneFunc func(vmi *v1.VirtualMachineInstance) (bool, string)

// NewPauseCommand is kemuctl pause.
func NewPauseCommand(c *cli.Cluster) *cobra.Command {
	return newVMIRequestCommand(c, vmiRequest{
		verb: "pause", sub: subresources.Pause, body: subresources.PauseOptions{},
		short: "Pause a running VirtualMachineInstance",
		long: `pause stops the guest's vCPUs: kemu-api records the request, the node agent on
the VMI's node carries it out, and kemuctl waits until the VMI's Paused
condition is True. Pausing a VMI that is paused already is an error, as in
KubeVirt.`,
		pending: "pause", done: "paused",
		doneFor: pauseDone,
	})
}

// NewUnpauseCommand is kemuctl unpause.
func NewUnpauseCommand(c *cli.Cluster) *cobra.Command {
	return newVMIRequestCommand(c, vmiRequest{
		verb: "unpause", sub: subresources.Unpause, body: subresources.UnpauseOptions{},
		short: "Unpause a paused VirtualMachineInstance",
		long: `unpause resumes a paused guest (also one paused by startStrategy Paused, or one
asked to pause that has not yet) and waits until the VMI's Paused condition is
no longer True. Unpausing a VMI that is not paused is an error, as in KubeVirt.`,
		pending: "unpause", done: "unpaused",
		doneFor: unpauseDone,
	})
}

// NewSoftRebootCommand is kemuctl soft-reboot.
func NewSoftRebootCommand(c *cli.Cluster) *cobra.Command {
	return newVMIRequestCommand(c, vmiRequest{
		verb: "soft-reboot", sub: subresources.SoftReboot, body: subresources.SoftRebootOptions{},
		short: "Soft-reboot a running VirtualMachineInstance",
		long: `soft-reboot asks the guest to reboot (through its guest agent, else by ACPI) and
waits until the node agent has acted on it (the VMI's annotation
` + v1.VMISoftRebootDoneAnnotation + ` carries the value kemu-api put in ` + v1.VMISoftRebootAnnotation + `).
A paused VMI cannot be soft-rebooted, as in KubeVirt.`,
		pending: "soft reboot", done: "soft rebooted",
		doneFor: softRebootDone,
	})
}

func newVMIRequestCommand(c *cli.Cluster, r vmiRequest) *cobra.Command {
	waitDone := true
	timeout := vmiWaitTimeout
	cmd := &cobra.Command{
		Use:     r.verb + " VMI [--wait=false] [--timeout DURATION]",
		Short:   r.short,
		Example: "  kemuctl " + r.verb + " myvmi -n myns",
		Long: r.long + `

kemuctl calls kemu-api's ` + r.sub.Name + ` subresource of the VMI (the user needs ` + r.sub.RBACVerb() + ` on
` + r.sub.Subresource() + ` in ` + subresources.Group + `, and get on the VMI to
wait). With --wait=false kemuctl returns once kemu-api recorded the request;
--timeout bounds the wait (default ` + vmiWaitTimeout.String() + `). The exit status is 1 when the VMI cannot be ` + r.done + ` (not found, not running,
timed out waiting, or the cluster not reached), 2 for a usage error.

` + cli.ConnectionHelp,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: c.CompleteVMIs,
		RunE: func(cmd *cobra.Command, args []string) error {
			errOut := cmd.ErrOrStderr()
			if timeout <= 0 {
				fmt.Fprintf(errOut, "kemuctl %s: --timeout %s: want a positive duration\n", r.verb, timeout)
				return cli.ExitError{Code: 2}
			}
			cl, err := c.Clients()
			var api *apiclient.Client
			if err == nil {
				api, err = apiclient.New(cl.Config)
			}
			if err != nil {
				fmt.Fprintf(errOut, "kemuctl %s: %v\n", r.verb, err)
				return cli.ExitError{Code: 1}
			}
			msg, err := r.run(cmd.Context(), api, cl.Kemu, cl.Namespace, args[0], waitDone, timeout)
			if err != nil {
				fmt.Fprintf(errOut, "kemuctl %s: %v\n", r.verb, err)
				return cli.ExitError{Code: 1}
			}
			fmt.Fprintln(cmd.OutOrStdout(), msg)
			return nil
		},
	}
	cmd.Flags().BoolVar(&waitDone, "wait", true, "wait until the node agent reports the request done")
	cmd.Flags().DurationVar(&timeout, "timeout", vmiWaitTimeout, "how long to wait")
	return cmd
}

// run asks kemu-api for the request and waits for it (if asked); it
// returns what to tell the user.
func (r vmiRequest) run(ctx context.Context, api putter, cs versioned.Interface, ns, name string, waitDone bool, timeout time.Duration) (string, error) {
	ref := fmt.Sprintf("VMI %s/%s", ns, name)
	apiCtx, cancel := context.WithTimeout(ctx, vmOpTimeout)
	defer cancel()
	if _, err := api.Put(apiCtx, r.sub, ns, name, r.body); err != nil {
		return "", requestError("VMI", subresources.VMIs, ns, name, err)
	}
	if !waitDone {
		return fmt.Sprintf("%s was scheduled to %s", ref, r.pending), nil
	}
	vmi, err := cs.KemuV1alpha1().VirtualMachineInstances(ns).Get(apiCtx, name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("%s: reading it after the %s request: %w", ref, r.pending, err)
	}
	done, err := r.doneFor(vmi)
	if err != nil {
		return "", fmt.Errorf("%s: %w", ref, err)
	}
	if err := waitVMI(ctx, cs, vmi, ref, r.done, timeout, done); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s was %s", ref, r.done), nil
}

// waitVMI polls the VMI until done, it goes away or ends, or timeout.
func waitVMI(ctx context.Context, cs versioned.Interface, orig *v1.VirtualMachineInstance, ref, what string,
	timeout time.Duration, done vmiDoneFunc) error {
	vmis := cs.KemuV1alpha1().VirtualMachineInstances(orig.Namespace)
	state := "" // what the VMI reported last
	var failed, readErr error
	err := wait.PollUntilContextTimeout(ctx, vmiPollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		vmi, err := vmis.Get(ctx, orig.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) || err == nil && vmi.UID != orig.UID:
			failed = fmt.Errorf("%s was deleted before it was %s", ref, what)
			return false, failed
		case err != nil:
			// Transient (the apiserver restarting, a timeout, the
			// last read cut by the deadline): retry until the deadline.
			readErr = err
			return false, nil
		case vmi.Status.Phase.IsFinal():
			failed = fmt.Errorf("%s ended (phase %s) before it was %s", ref, vmiPhase(vmi), what)
			return false, failed
		}
		ok, s := done(vmi)
		state, readErr = s, nil
		return ok, nil
	})
	if failed != nil {
		return failed
	}
	if err != nil {
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return fmt.Errorf("%s: interrupted while waiting for it to be %s", ref, what)
		}
		switch {
		case state == "" && readErr != nil:
			state = "reading it: " + readErr.Error()
		case state == "":
			state = "no report yet"
		}
		node := ""
		if orig.Status.NodeName != "" {
			node = " on node " + orig.Status.NodeName
		}
		return fmt.Errorf("timed out after %s waiting for %s to be %s (%s); is the kemu node agent%s running?",
			timeout, ref, what, state, node)
	}
	return nil
}

// isPaused says whether the VMI's Paused condition is True (kemu-api's
// subresource.IsPaused, which kemuctl does not link).
func isPaused(vmi *v1.VirtualMachineInstance) bool {
	return vmistatus.HasCondition(vmi, v1.VirtualMachineInstancePaused, corev1.ConditionTrue, "")
}

// describePaused renders the Paused condition for messages.
func describePaused(vmi *v1.VirtualMachineInstance) string {
	c, ok := vmistatus.Condition(vmi, v1.VirtualMachineInstancePaused)
	if !ok {
		return "no Paused condition"
	}
	s := "Paused condition " + string(c.Status)
	if c.Reason != "" {
		s += ", reason " + c.Reason
	}
	if c.Message != "" {
		s += ": " + c.Message
	}
	return s
}

func pauseDone(*v1.VirtualMachineInstance) (vmiDoneFunc, error) {
	return func(vmi *v1.VirtualMachineInstance) (bool, string) {
		return isPaused(vmi), describePaused(vmi)
	}, nil
}

func unpauseDone(*v1.VirtualMachineInstance) (vmiDoneFunc, error) {
	return func(vmi *v1.VirtualMachineInstance) (bool, string) {
		return !isPaused(vmi), describePaused(vmi)
	}, nil
}

// softRebootDone waits for the node agent to copy the request's value, as
// kemu-api recorded it, to kemu.dev/soft-reboot-done.
func softRebootDone(accepted *v1.VirtualMachineInstance) (vmiDoneFunc, error) {
	value := accepted.Annotations[v1.VMISoftRebootAnnotation]
	if value == "" {
		return nil, fmt.Errorf("no %s annotation after kemu-api accepted the soft reboot", v1.VMISoftRebootAnnotation)
	}
	return func(vmi *v1.VirtualMachineInstance) (bool, string) {
		got, ok := vmi.Annotations[v1.VMISoftRebootDoneAnnotation]
		if got == value {
			return true, ""
		}
		if !ok {
			return false, "no " + v1.VMISoftRebootDoneAnnotation + " annotation"
		}
		return false, fmt.Sprintf("%s is %q, not %q", v1.VMISoftRebootDoneAnnotation, got, value)
	}, nil
}
