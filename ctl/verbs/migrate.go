package verbs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	"github.com/kemu-dev/kemu/api/subresources"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/ctl/apiclient"
	"github.com/kemu-dev/kemu/ctl/cli"
	"github.com/kemu-dev/kemu/ctl/shell"
)

// Defaults of migrate and migrate-cancel.
const (
	// migrateWaitTimeout is --timeout's default with --wait: KubeVirt's
	// completion timeout for a few GiB plus scheduling the target Pod.
	migrateWaitTimeout = 15 * time.Minute
	// migratePollInterval is how often the migration is read while waiting.
	migratePollInterval = 500 * time.Millisecond
)

// NewMigrateCommand is kemuctl migrate.
func NewMigrateCommand(c *cli.Cluster) *cobra.Command {
	var waitDone bool
	timeout := migrateWaitTimeout
	cmd := &cobra.Command{
		Use:     "migrate VMI [--wait] [--timeout DURATION]",
		Short:   "Live-migrate a running VirtualMachineInstance to another node",
		Example: "  kemuctl migrate myvmi -n myns --wait",
		Long: `migrate calls kemu-api's migrate subresource of the VMI (as virtctl migrate
does; the user needs update on virtualmachineinstances/migrate in
` + subresources.Group + `), which creates a VirtualMachineInstanceMigration, and
prints its name. With --wait it follows the migration: each
phase, the data transferred and remaining while memory moves, and at the end the
node the VMI runs on, the total time and the guest's downtime; the exit status
is 1 when the migration fails (its reason is printed) or --timeout (default
` + migrateWaitTimeout.String() + `) passes first — the migration itself goes on then; kemuctl
migrate-cancel stops it. Exit status 2 for a usage error.

` + cli.ConnectionHelp,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: c.CompleteVMIs,
		RunE: func(cmd *cobra.Command, args []string) error {
			errOut := cmd.ErrOrStderr()
			if timeout <= 0 {
				fmt.Fprintf(errOut, "kemuctl migrate: --timeout %s: want a positive duration\n", timeout)
				return cli.ExitError{Code: 2}
			}
			cl, err := c.Clients()
			var api *apiclient.Client
			if err == nil {
				api, err = apiclient.New(cl.Config)
			}
			if err == nil {
				err = migrate(cmd.Context(), cmd.OutOrStdout(), api, cl.Kemu, cl.Namespace, args[0], waitDone, timeout)
			}
			if err != nil {
				fmt.Fprintf(errOut, "kemuctl migrate: %v\n", err)
				return cli.ExitError{Code: 1}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&waitDone, "wait", false, "follow the migration until it succeeds or fails")
	cmd.Flags().DurationVar(&timeout, "timeout", migrateWaitTimeout, "how long --wait waits")
	return cmd
}

// NewMigrateCancelCommand is kemuctl migrate-cancel.
func NewMigrateCancelCommand(c *cli.Cluster) *cobra.Command {
	waitDone := true
	timeout := vmiWaitTimeout
	cmd := &cobra.Command{
		Use:     "migrate-cancel VMI [--wait=false] [--timeout DURATION]",
		Short:   "Cancel the live migration of a VirtualMachineInstance",
		Example: "  kemuctl migrate-cancel myvmi -n myns",
		Long: `migrate-cancel deletes the VMI's unfinished VirtualMachineInstanceMigration (as
virtctl migrate-cancel does): before the target is ready the controller deletes
the target Pod; while memory moves the source's node agent aborts the migration
and the guest keeps running where it was. A migration that switched to
post-copy cannot be canceled. kemuctl waits until the migration object is gone
(--wait=false: returns at once; --timeout, default ` + vmiWaitTimeout.String() + `) and prints the outcome.
Exit status 1 when the VMI has no migration to cancel, the abort failed or the
wait timed out; 2 for a usage error.

` + cli.ConnectionHelp,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: c.CompleteVMIs,
		RunE: func(cmd *cobra.Command, args []string) error {
			errOut := cmd.ErrOrStderr()
			if timeout <= 0 {
				fmt.Fprintf(errOut, "kemuctl migrate-cancel: --timeout %s: want a positive duration\n", timeout)
				return cli.ExitError{Code: 2}
			}
			cl, err := c.Clients()
			if err == nil {
				err = migrateCancel(cmd.Context(), cmd.OutOrStdout(), cl.Kemu, cl.Namespace, args[0], waitDone, timeout)
			}
			if err != nil {
				fmt.Fprintf(errOut, "kemuctl migrate-cancel: %v\n", err)
				return cli.ExitError{Code: 1}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&waitDone, "wait", true, "wait until the migration is canceled")
	cmd.Flags().DurationVar(&timeout, "timeout", vmiWaitTimeout, "how long to wait")
	return cmd
}

// migrate asks kemu-api for the VMI's migration and, with waitDone,
// follows the migration it created.
func migrate(ctx context.Context, out io.Writer, api putter, cs versioned.Interface, ns, name string, waitDone bool, timeout time.Duration) error {
	ref := fmt.Sprintf("VMI %s/%s", ns, name)
	apiCtx, cancel := context.WithTimeout(ctx, vmOpTimeout)
	defer cancel()
	// Read first: the node it leaves, and a clear refusal of a VMI that
	// does not run (kemu-api would create a migration the controller
	// then fails).
	vmi, err := cs.KemuV1alpha1().VirtualMachineInstances(ns).Get(apiCtx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%s not found", ref)
	case err != nil:
		return fmt.Errorf("%s: %w", ref, err)
	case vmi.Status.Phase != v1.Running:
		phase := phaseOrNone(vmi.Status.Phase)
		if vmi.Status.Phase != "" {
			phase = vmiPhase(vmi)
		}
		return fmt.Errorf("%s is %s, not Running: only a running VMI migrates", ref, phase)
	}
	raw, err := api.Put(apiCtx, subresources.Migrate, ns, name, subresources.MigrateOptions{})
	if err != nil {
		return requestError("VMI", subresources.VMIs, ns, name, err)
	}
	vmim := &v1.VirtualMachineInstanceMigration{}
	if err := json.Unmarshal(raw, vmim); err != nil || vmim.Name == "" || vmim.UID == "" {
		return fmt.Errorf("%s: kemu-api's reply to migrate is not the migration it created (%v): %.200q", ref, err, raw)
	}
	fmt.Fprintf(out, "VirtualMachineInstanceMigration %s/%s created for %s (from node %s)\n", ns, vmim.Name, ref, vmi.Status.NodeName)
	if !waitDone {
		return nil
	}
	return followMigration(ctx, out, cs, vmim, ref, timeout)
}

// followMigration prints the migration's phases and progress until it is
// final or timeout passes.
func followMigration(ctx context.Context, out io.Writer, cs versioned.Interface, vmim *v1.VirtualMachineInstanceMigration, ref string, timeout time.Duration) error {
	p := &migrationProgress{out: out}
	var result, readErr error
	err := wait.PollUntilContextTimeout(ctx, migratePollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		m, err := cs.KemuV1alpha1().VirtualMachineInstanceMigrations(vmim.Namespace).Get(ctx, vmim.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) || err == nil && m.UID != vmim.UID:
			result = fmt.Errorf("the migration %s was deleted (canceled) before it ended", vmim.Name)
			return true, nil
		case err != nil:
			readErr = err // transient: retry until the deadline
			return false, nil
		}
		vmi, err := cs.KemuV1alpha1().VirtualMachineInstances(vmim.Namespace).Get(ctx, vmim.Spec.VMIName, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			readErr = err
			return false, nil
		}
		if apierrors.IsNotFound(err) {
			vmi = nil
		}
		done, res := p.update(m, vmi, ref)
		result = res
		return done, nil
	})
	if result != nil || err == nil {
		return result
	}
	if readErr != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("%s: the migration %s did not end within %s (last read: %v)", ref, vmim.Name, timeout, readErr)
	}
	return fmt.Errorf("%s: the migration %s did not end within %s (phase %s); it goes on: kemuctl migrate-cancel stops it",
		ref, vmim.Name, timeout, phaseOrNone(p.phase))
}

// migrationProgress prints what changed since the last read.
type migrationProgress struct {
	out       io.Writer
	phase     v1.VirtualMachineInstanceMigrationPhase
	lastStats time.Time
	lastLine  string
}

// update prints the news of m (and its VMI) and says whether it is final,
// with the error of a failed migration.
func (p *migrationProgress) update(m *v1.VirtualMachineInstanceMigration, vmi *v1.VirtualMachineInstance, ref string) (bool, error) {
	if m.Status.Phase != p.phase {
		p.phase = m.Status.Phase
		fmt.Fprintf(p.out, "phase: %s\n", phaseOrNone(p.phase))
	}
	var st *v1.VirtualMachineInstanceMigrationState
	if vmi != nil && vmi.Status.MigrationState != nil && vmi.Status.MigrationState.MigrationUID == m.UID {
		st = vmi.Status.MigrationState
	}
	if st != nil && st.Statistics != nil && !m.Status.Phase.IsFinal() && time.Since(p.lastStats) >= time.Second {
		if line := progressLine(st.Statistics); line != p.lastLine {
			fmt.Fprintln(p.out, line)
			p.lastLine, p.lastStats = line, time.Now()
		}
	}
	switch m.Status.Phase {
	case v1.MigrationSucceeded:
		node := ""
		if vmi != nil {
			node = vmi.Status.NodeName
		}
		msg := fmt.Sprintf("%s migrated to node %s", ref, node)
		if st != nil && st.Statistics != nil {
			s := st.Statistics
			msg += fmt.Sprintf(": total %s, downtime %s, %s transferred in %d passes",
				time.Duration(s.TotalMilliseconds)*time.Millisecond, time.Duration(s.DowntimeMilliseconds)*time.Millisecond,
				shell.BytesString(s.DataProcessedBytes), s.Passes)
		}
		fmt.Fprintln(p.out, msg)
		return true, nil
	case v1.MigrationFailed:
		reason := failureText(m, st)
		return true, fmt.Errorf("%s: the migration %s failed: %s", ref, m.Name, reason)
	}
	return false, nil
}

// progressLine is one line of transfer progress.
func progressLine(s *v1.MigrationStatistics) string {
	line := fmt.Sprintf("memory: %s of %s transferred, %s remaining, pass %d",
		shell.BytesString(s.DataProcessedBytes), shell.BytesString(s.DataTotalBytes), shell.BytesString(s.DataRemainingBytes), s.Passes)
	if s.DiskTotalBytes > 0 {
		line += fmt.Sprintf("; disks: %s of %s", shell.BytesString(s.DiskProcessedBytes), shell.BytesString(s.DiskTotalBytes))
	}
	return line
}

// failureText says why a migration failed: its condition, else the VMI's
// migrationState.
func failureText(m *v1.VirtualMachineInstanceMigration, st *v1.VirtualMachineInstanceMigrationState) string {
	for _, c := range m.Status.Conditions {
		if c.Status == "True" && (c.Reason != "" || c.Message != "") {
			return fmt.Sprintf("%s: %s", c.Reason, c.Message)
		}
	}
	if st != nil && st.FailureReason != "" {
		return st.FailureReason
	}
	return "no reason recorded"
}

// migrateCancel deletes the VMI's unfinished migration and, with
// waitDone, waits until it is gone.
func migrateCancel(ctx context.Context, out io.Writer, cs versioned.Interface, ns, name string, waitDone bool, timeout time.Duration) error {
	ref := fmt.Sprintf("VMI %s/%s", ns, name)
	apiCtx, cancel := context.WithTimeout(ctx, vmOpTimeout)
	defer cancel()
	list, err := cs.KemuV1alpha1().VirtualMachineInstanceMigrations(ns).List(apiCtx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("%s: listing its migrations: %w", ref, err)
	}
	var active []v1.VirtualMachineInstanceMigration
	for _, m := range list.Items {
		if m.Spec.VMIName == name && !m.Status.Phase.IsFinal() && m.DeletionTimestamp == nil {
			active = append(active, m)
		}
	}
	if len(active) == 0 {
		return fmt.Errorf("%s has no migration in progress", ref)
	}
	for _, m := range active {
		uid := m.UID
		err := cs.KemuV1alpha1().VirtualMachineInstanceMigrations(ns).Delete(apiCtx, m.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("%s: canceling the migration %s: %w", ref, m.Name, err)
		}
		fmt.Fprintf(out, "migration %s/%s of %s: cancel requested\n", ns, m.Name, ref)
	}
	if !waitDone {
		return nil
	}
	for _, m := range active {
		if err := waitCanceled(ctx, out, cs, &m, ref, timeout); err != nil {
			return err
		}
	}
	return nil
}

// waitCanceled waits until the canceled migration m is gone and says how
// it ended (the VMI's migrationState).
func waitCanceled(ctx context.Context, out io.Writer, cs versioned.Interface, m *v1.VirtualMachineInstanceMigration, ref string, timeout time.Duration) error {
	var last *v1.VirtualMachineInstanceMigration
	err := wait.PollUntilContextTimeout(ctx, migratePollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		cur, err := cs.KemuV1alpha1().VirtualMachineInstanceMigrations(m.Namespace).Get(ctx, m.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err == nil && cur.UID != m.UID {
			return true, nil
		}
		if err == nil {
			last = cur
		}
		return false, nil
	})
	if err != nil {
		phase := m.Status.Phase
		if last != nil {
			phase = last.Status.Phase
		}
		return fmt.Errorf("%s: the migration %s is still there after %s (phase %s)", ref, m.Name, timeout, phaseOrNone(phase))
	}
	vmi, err := cs.KemuV1alpha1().VirtualMachineInstances(m.Namespace).Get(ctx, m.Spec.VMIName, metav1.GetOptions{})
	if err != nil {
		fmt.Fprintf(out, "migration %s canceled\n", m.Name)
		return nil
	}
	st := vmi.Status.MigrationState
	if st == nil || st.MigrationUID != m.UID {
		fmt.Fprintf(out, "migration %s canceled before it started; %s runs on node %s\n", m.Name, ref, vmi.Status.NodeName)
		return nil
	}
	if st.Completed && !st.Failed {
		return fmt.Errorf("%s: the migration %s completed before it could be canceled; the VMI runs on node %s", ref, m.Name, vmi.Status.NodeName)
	}
	if st.AbortStatus == v1.MigrationAbortFailed {
		return fmt.Errorf("%s: the migration %s could not be canceled (%s); the VMI runs on node %s", ref, m.Name, st.FailureReason, vmi.Status.NodeName)
	}
	fmt.Fprintf(out, "migration %s canceled; %s runs on node %s\n", m.Name, ref, vmi.Status.NodeName)
	return nil
}

// phaseOrNone names a phase, "(none)" for the empty one.
func phaseOrNone[T ~string](p T) string {
	if p == "" {
		return "(none)"
	}
	return string(p)
}
