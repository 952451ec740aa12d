// Package verbs is kemuctl's verbs on a cluster: start, stop and restart
// a VirtualMachine; pause, unpause and soft-reboot a VirtualMachineInstance
// (annotations the node agent carries out); console and shell VMI, run in
// the VMI's launcher Pod through the Kubernetes exec API.
package verbs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/ctl/cli"
)

// vmOpTimeout bounds one start/stop/restart (a few API calls).
const vmOpTimeout = 30 * time.Second

// vmOp changes a VM's run state; it returns what to tell the user.
type vmOp func(ctx context.Context, cs versioned.Interface, ns, name string) (string, error)

// NewStartCommand is kemuctl start.
func NewStartCommand(c *cli.Cluster) *cobra.Command {
	return newVMCommand(c, "start", "Start a VirtualMachine", `start asks the VM controller to start the VM's VMI:
runStrategy Halted becomes Always; Manual and RerunOnFailure get a Start request
(a Manual VM whose VMI ended is restarted). A VM with runStrategy Always or Once
is started by the controller itself, so start refuses it, as it refuses a VM
that runs already.`, startVM)
}

// NewStopCommand is kemuctl stop.
func NewStopCommand(c *cli.Cluster) *cobra.Command {
	return newVMCommand(c, "stop", "Stop a VirtualMachine", `stop stops the VM's VMI: runStrategy Always, RerunOnFailure and Once become
Halted (the controller deletes the VMI, which powers the guest off within its
terminationGracePeriodSeconds); for Manual the VMI is deleted directly and the
VM stays Manual.`, stopVM)
}

// NewRestartCommand is kemuctl restart.
func NewRestartCommand(c *cli.Cluster) *cobra.Command {
	return newVMCommand(c, "restart", "Restart a VirtualMachine", `restart replaces a running VM's VMI by a new one: it queues a Stop of the
current VMI and a Start, then deletes the VMI; the VM controller creates the new
one once the old one is gone. For runStrategy Always, RerunOnFailure and Manual;
a Halted VM is started with kemuctl start, and Once runs only once.`, restartVM)
}

func newVMCommand(c *cli.Cluster, verb, short, long string, op vmOp) *cobra.Command {
	cmd := &cobra.Command{
		Use:     verb + " VM",
		Short:   short,
		Example: "  kemuctl " + verb + " myvm -n myns",
		Long: long + `

` + cli.ConnectionHelp + `
The exit status is 1 when the VM cannot be ` + verb + `ed (or the cluster not
reached), 2 for a usage error.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: c.CompleteVMs,
		RunE: func(cmd *cobra.Command, args []string) error {
			errOut := cmd.ErrOrStderr()
			cl, err := c.Clients()
			if err != nil {
				fmt.Fprintf(errOut, "kemuctl %s: %v\n", verb, err)
				return cli.ExitError{Code: 1}
			}
			cs, ns := cl.Kemu, cl.Namespace
			ctx, cancel := context.WithTimeout(cmd.Context(), vmOpTimeout)
			defer cancel()
			msg, err := op(ctx, cs, ns, args[0])
			// The VM changed between reading and writing it (the
			// controller writes its status): decide again.
			for attempt := 0; errors.As(err, new(conflictError)) && attempt < 4; attempt++ {
				msg, err = op(ctx, cs, ns, args[0])
			}
			if err != nil {
				fmt.Fprintf(errOut, "kemuctl %s: %v\n", verb, err)
				return cli.ExitError{Code: 1}
			}
			fmt.Fprintln(cmd.OutOrStdout(), msg)
			return nil
		},
	}
	return cmd
}

// conflictError: the VM changed since it was read.
type conflictError struct{ ref string }

func (e conflictError) Error() string { return e.ref + " changed meanwhile, try again" }

// vmState is a VM, its run strategy and its VMI (nil when it has none).
type vmState struct {
	vm  *v1.VirtualMachine
	rs  v1.VirtualMachineRunStrategy
	vmi *v1.VirtualMachineInstance
	ref string // "VM ns/name", for messages
}

func getVMState(ctx context.Context, cs versioned.Interface, ns, name string) (*vmState, error) {
	s := &vmState{ref: fmt.Sprintf("VM %s/%s", ns, name)}
	vm, err := cs.KemuV1alpha1().VirtualMachines(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%s not found", s.ref)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.ref, err)
	}
	s.vm = vm
	d := vm.DeepCopy()
	v1.SetVirtualMachineDefaults(d)
	s.rs = *d.Spec.RunStrategy
	vmi, err := cs.KemuV1alpha1().VirtualMachineInstances(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, fmt.Errorf("%s: its VMI: %w", s.ref, err)
	default:
		s.vmi = vmi
	}
	return s, nil
}

// running says whether the VMI exists and has not ended (KubeVirt's test:
// not Succeeded, Failed, Unknown or without a phase yet).
func (s *vmState) running() bool {
	return s.vmi != nil && !s.vmi.Status.Phase.IsFinal() && s.vmi.Status.Phase != v1.Unknown &&
		s.vmi.Status.Phase != v1.VmPhaseUnset
}

func (s *vmState) alive() bool { return s.vmi != nil && !s.vmi.Status.Phase.IsFinal() }

func startVM(ctx context.Context, cs versioned.Interface, ns, name string) (string, error) {
	s, err := getVMState(ctx, cs, ns, name)
	if err != nil {
		return "", err
	}
	if s.running() {
		return "", fmt.Errorf("%s is already running (VMI phase %s)", s.ref, s.vmi.Status.Phase)
	}
	switch s.rs {
	case v1.RunStrategyHalted:
		if err := setRunStrategy(ctx, cs, s, v1.RunStrategyAlways); err != nil {
			return "", err
		}
	case v1.RunStrategyManual, v1.RunStrategyRerunOnFailure:
		if s.rs == v1.RunStrategyRerunOnFailure && s.vmi != nil && s.vmi.Status.Phase == v1.Failed {
			return "", fmt.Errorf("%s: runStrategy RerunOnFailure restarts a failed VMI by itself", s.ref)
		}
		reqs := []v1.VirtualMachineStateChangeRequest{{Action: v1.StartRequest}}
		if s.vmi != nil && s.vmi.Status.Phase.IsFinal() {
			// The ended VMI goes first.
			uid := string(s.vmi.UID)
			reqs = append([]v1.VirtualMachineStateChangeRequest{{Action: v1.StopRequest, UID: &uid}}, reqs...)
		}
		if err := addStateChangeRequests(ctx, cs, s, reqs); err != nil {
			return "", err
		}
	default: // Always, Once
		return "", fmt.Errorf("%s has runStrategy %s: the VM controller starts it by itself, "+
			"manual start requests are not supported", s.ref, s.rs)
	}
	return fmt.Sprintf("%s was scheduled to start", s.ref), nil
}

func stopVM(ctx context.Context, cs versioned.Interface, ns, name string) (string, error) {
	s, err := getVMState(ctx, cs, ns, name)
	if err != nil {
		return "", err
	}
	switch s.rs {
	case v1.RunStrategyHalted:
		if !s.alive() {
			return "", fmt.Errorf("%s is not running", s.ref)
		}
		// Halted already: the controller is deleting the VMI; help it.
		if err := deleteVMI(ctx, cs, s); err != nil {
			return "", err
		}
	case v1.RunStrategyManual:
		if !s.alive() {
			return "", fmt.Errorf("%s is not running", s.ref)
		}
		if err := deleteVMI(ctx, cs, s); err != nil {
			return "", err
		}
	default: // Always, RerunOnFailure, Once
		if err := setRunStrategy(ctx, cs, s, v1.RunStrategyHalted); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("%s was scheduled to stop", s.ref), nil
}

func restartVM(ctx context.Context, cs versioned.Interface, ns, name string) (string, error) {
	s, err := getVMState(ctx, cs, ns, name)
	if err != nil {
		return "", err
	}
	switch s.rs {
	case v1.RunStrategyHalted:
		return "", fmt.Errorf("%s is stopped (runStrategy Halted): start it with kemuctl start", s.ref)
	case v1.RunStrategyOnce:
		return "", fmt.Errorf("%s has runStrategy Once, which runs its VMI only once: restart is not supported", s.ref)
	}
	if !s.alive() {
		return "", fmt.Errorf("%s is not running: start it with kemuctl start", s.ref)
	}
	if s.vmi.DeletionTimestamp != nil {
		return "", fmt.Errorf("%s is stopping already", s.ref)
	}
	uid := string(s.vmi.UID)
	if err := addStateChangeRequests(ctx, cs, s, []v1.VirtualMachineStateChangeRequest{
		{Action: v1.StopRequest, UID: &uid}, {Action: v1.StartRequest}}); err != nil {
		return "", err
	}
	if err := deleteVMI(ctx, cs, s); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s was scheduled to restart", s.ref), nil
}

// setRunStrategy patches spec.runStrategy (dropping the deprecated
// spec.running), only on the VM as read.
func setRunStrategy(ctx context.Context, cs versioned.Interface, s *vmState, rs v1.VirtualMachineRunStrategy) error {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": s.vm.ResourceVersion},
		"spec":     map[string]any{"runStrategy": rs, "running": nil},
	})
	if err != nil {
		return err
	}
	_, err = cs.KemuV1alpha1().VirtualMachines(s.vm.Namespace).Patch(ctx, s.vm.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsConflict(err) {
		return conflictError{s.ref}
	}
	if err != nil {
		return fmt.Errorf("%s: setting runStrategy %s: %w", s.ref, rs, err)
	}
	return nil
}

// addStateChangeRequests queues requests for the VM controller in the VM's
// status (as KubeVirt's virt-api does), refusing when some are pending.
func addStateChangeRequests(ctx context.Context, cs versioned.Interface, s *vmState, reqs []v1.VirtualMachineStateChangeRequest) error {
	if pending := s.vm.Status.StateChangeRequests; len(pending) > 0 {
		return fmt.Errorf("%s has a state change pending (%s): try again once the VM controller handled it",
			s.ref, pending[0].Action)
	}
	upd := s.vm.DeepCopy()
	upd.Status.StateChangeRequests = reqs
	_, err := cs.KemuV1alpha1().VirtualMachines(upd.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		return conflictError{s.ref}
	}
	if err != nil {
		return fmt.Errorf("%s: requesting %s: %w", s.ref, reqs[len(reqs)-1].Action, err)
	}
	return nil
}

// deleteVMI deletes the VMI read, not a newer one of the same name.
func deleteVMI(ctx context.Context, cs versioned.Interface, s *vmState) error {
	err := cs.KemuV1alpha1().VirtualMachineInstances(s.vmi.Namespace).Delete(ctx, s.vmi.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &s.vmi.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("%s: deleting VMI: %w", s.ref, err)
	}
	return nil
}
