package verbs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/ctl/cli"
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
// an annotation (api/v1alpha1/labels.go), reconciled by the node agent.
type vmiRequest struct {
	verb  string // the command: pause, unpause, soft-reboot
	short string
	long  string
	// pending and done complete "VMI ns/name was scheduled to <pending>"
	// and "VMI ns/name was <done>".
	pending, done string
	// plan checks the VMI as read and returns the annotations to merge
	// (nil values remove one) and the test of the request being done.
	plan func(vmi *v1.VirtualMachineInstance, ref string, now time.Time) (map[string]any, vmiDoneFunc, error)
}

// vmiDoneFunc says whether the request is done, else describes what the VMI
// reports instead (for the timeout message).
type vmiDoneFunc func(vmi *v1.VirtualMachineInstance) (bool, string)

// NewPauseCommand is kemuctl pause.
func NewPauseCommand(c *cli.Cluster) *cobra.Command {
	return newVMIRequestCommand(c, vmiRequest{
		verb:  "pause",
		short: "Pause a running VirtualMachineInstance",
		long: `pause stops the guest's vCPUs: it sets the VMI's annotation kemu.dev/paused
"true", which the node agent on the VMI's node carries out, and waits until the
VMI's Paused condition is True. Pausing a VMI that is paused already is an
error, as in KubeVirt.`,
		pending: "pause", done: "paused",
		plan: planPause,
	})
}

// NewUnpauseCommand is kemuctl unpause.
func NewUnpauseCommand(c *cli.Cluster) *cobra.Command {
	return newVMIRequestCommand(c, vmiRequest{
		verb:  "unpause",
		short: "Unpause a paused VirtualMachineInstance",
		long: `unpause resumes a paused guest: it removes the VMI's annotation
kemu.dev/paused (or sets it "false" when the VMI is paused without it, e.g. by
startStrategy Paused) and waits until the VMI's Paused condition is no longer
True. Unpausing a VMI that is not paused is an error, as in KubeVirt.`,
		pending: "unpause", done: "unpaused",
		plan: planUnpause,
	})
}

// NewSoftRebootCommand is kemuctl soft-reboot.
func NewSoftRebootCommand(c *cli.Cluster) *cobra.Command {
	return newVMIRequestCommand(c, vmiRequest{
		verb:  "soft-reboot",
		short: "Soft-reboot a running VirtualMachineInstance",
		long: `soft-reboot asks the guest to reboot (through its guest agent, else by ACPI): it
sets the VMI's annotation kemu.dev/soft-reboot to a new value and waits until
the node agent has acted on it (kemu.dev/soft-reboot-done carries that value).
A paused VMI cannot be soft-rebooted, as in KubeVirt.`,
		pending: "soft reboot", done: "soft rebooted",
		plan: planSoftReboot,
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

With --wait=false kemuctl returns once the request is recorded; --timeout bounds
the wait (default ` + vmiWaitTimeout.String() + `). The exit status is 1 when the VMI cannot be ` + r.done + ` (not found, not running,
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
			if err != nil {
				fmt.Fprintf(errOut, "kemuctl %s: %v\n", r.verb, err)
				return cli.ExitError{Code: 1}
			}
			msg, err := r.run(cmd.Context(), cl.Kemu, cl.Namespace, args[0], waitDone, timeout)
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

// run records the request and waits for it (if asked); it returns what to
// tell the user.
func (r vmiRequest) run(ctx context.Context, cs versioned.Interface, ns, name string, waitDone bool, timeout time.Duration) (string, error) {
	ref := fmt.Sprintf("VMI %s/%s", ns, name)
	vmis := cs.KemuV1alpha1().VirtualMachineInstances(ns)
	apiCtx, cancel := context.WithTimeout(ctx, vmOpTimeout)
	defer cancel()
	vmi, err := vmis.Get(apiCtx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", fmt.Errorf("%s not found", ref)
	}
	if err != nil {
		return "", fmt.Errorf("%s: %w", ref, err)
	}
	annotations, done, err := r.plan(vmi, ref, time.Now())
	if err != nil {
		return "", err
	}
	// The UID makes the patch fail (Conflict) on a new VMI of the same name.
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": vmi.UID, "annotations": annotations}})
	if err != nil {
		return "", err
	}
	if _, err := vmis.Patch(apiCtx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return "", fmt.Errorf("%s not found", ref)
		case apierrors.IsConflict(err):
			return "", fmt.Errorf("%s was replaced meanwhile, try again", ref)
		}
		return "", fmt.Errorf("%s: requesting %s: %w", ref, r.pending, err)
	}
	if !waitDone {
		return fmt.Sprintf("%s was scheduled to %s", ref, r.pending), nil
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
			failed = fmt.Errorf("%s ended (phase %s) before it was %s", ref, vmi.Status.Phase, what)
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

// checkRunning refuses a VMI that does not run: virt-api's test for pause
// and soft reboot (phase Running), and not being deleted.
func checkRunning(vmi *v1.VirtualMachineInstance, ref string) error {
	if vmi.DeletionTimestamp != nil {
		return fmt.Errorf("%s is stopping", ref)
	}
	if vmi.Status.Phase != v1.Running {
		phase := string(vmi.Status.Phase)
		if phase == "" {
			phase = "none yet"
		}
		return fmt.Errorf("%s is not running (phase %s)", ref, phase)
	}
	return nil
}

// pausedCondition returns the VMI's Paused condition (nil when absent).
func pausedCondition(vmi *v1.VirtualMachineInstance) *v1.VirtualMachineInstanceCondition {
	for i := range vmi.Status.Conditions {
		if vmi.Status.Conditions[i].Type == v1.VirtualMachineInstancePaused {
			return &vmi.Status.Conditions[i]
		}
	}
	return nil
}

func isPaused(vmi *v1.VirtualMachineInstance) bool {
	c := pausedCondition(vmi)
	return c != nil && c.Status == corev1.ConditionTrue
}

// describePaused renders the Paused condition for messages.
func describePaused(vmi *v1.VirtualMachineInstance) string {
	c := pausedCondition(vmi)
	if c == nil {
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

func planPause(vmi *v1.VirtualMachineInstance, ref string, _ time.Time) (map[string]any, vmiDoneFunc, error) {
	if err := checkRunning(vmi, ref); err != nil {
		return nil, nil, err
	}
	if isPaused(vmi) {
		return nil, nil, fmt.Errorf("%s is already paused", ref)
	}
	return map[string]any{v1.VMIPausedAnnotation: "true"}, func(vmi *v1.VirtualMachineInstance) (bool, string) {
		return isPaused(vmi), describePaused(vmi)
	}, nil
}

func planUnpause(vmi *v1.VirtualMachineInstance, ref string, _ time.Time) (map[string]any, vmiDoneFunc, error) {
	if err := checkRunning(vmi, ref); err != nil {
		return nil, nil, err
	}
	requested := vmi.Annotations[v1.VMIPausedAnnotation] == "true"
	if !isPaused(vmi) && !requested {
		return nil, nil, fmt.Errorf("%s is not paused", ref)
	}
	// Not paused yet but asked to be: withdrawing the request is the unpause.
	var value any // remove the annotation
	if _, ok := vmi.Annotations[v1.VMIPausedAnnotation]; !ok {
		// Paused without it (startStrategy Paused): an explicit "false"
		// changes the object, so the node agent sees a request.
		value = "false"
	}
	return map[string]any{v1.VMIPausedAnnotation: value}, func(vmi *v1.VirtualMachineInstance) (bool, string) {
		return !isPaused(vmi), describePaused(vmi)
	}, nil
}

func planSoftReboot(vmi *v1.VirtualMachineInstance, ref string, now time.Time) (map[string]any, vmiDoneFunc, error) {
	if err := checkRunning(vmi, ref); err != nil {
		return nil, nil, err
	}
	if isPaused(vmi) {
		return nil, nil, fmt.Errorf("%s is paused: unpause it first", ref)
	}
	// A new value per request; the node agent acts once per distinct value.
	value := now.UTC().Format(time.RFC3339Nano)
	return map[string]any{v1.VMISoftRebootAnnotation: value}, func(vmi *v1.VirtualMachineInstance) (bool, string) {
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
