//go:build cluster

package migration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// driveToRunning takes migration m of VMI name from Scheduling to Running,
// playing the scheduler, the kubelet and both node agents; it returns the
// target Pod.
func driveToRunning(t *testing.T, ns, name string, m *v1.VirtualMachineInstanceMigration) *corev1.Pod {
	t.Helper()
	waitMigration(t, ns, m.Name, "Scheduling", inPhase(v1.MigrationScheduling))
	target := targetOf(t, ns, m)
	bind(t, target, targetNode)
	waitMigration(t, ns, m.Name, "Scheduled", inPhase(v1.MigrationScheduled))
	setPodStatus(t, ns, target.Name, podRunning)
	waitMigration(t, ns, m.Name, "PreparingTarget", inPhase(v1.MigrationPreparingTarget))
	setState(t, ns, name, func(ms *v1.VirtualMachineInstanceMigrationState) { // the target node agent
		ms.TargetNodeAddress, ms.TargetMigrationPort, ms.TargetNodeDomainDetected = "10.250.0.12", 4444, true
	})
	waitMigration(t, ns, m.Name, "TargetReady", inPhase(v1.MigrationTargetReady))
	setState(t, ns, name, func(ms *v1.VirtualMachineInstanceMigrationState) { // the source node agent
		now := metav1.Now()
		ms.StartTimestamp, ms.Mode = &now, v1.MigrationPreCopy
	})
	waitMigration(t, ns, m.Name, "Running", inPhase(v1.MigrationRunning))
	return getPod(t, ns, target.Name)
}

// complete plays the source agent (completed) and the target agent (domain
// ready).
func complete(t *testing.T, ns, name string) {
	t.Helper()
	setState(t, ns, name, func(ms *v1.VirtualMachineInstanceMigrationState) {
		now := metav1.Now()
		ms.Completed, ms.TargetNodeDomainReadyTimestamp = true, &now
		ms.Statistics = &v1.MigrationStatistics{DataTotalBytes: 128 << 20, DataProcessedBytes: 128 << 20}
	})
}

// TestHappyPath: a migration from node-a to node-b through every phase;
// the target Pod is the source's template off the source node; the VMI's
// migrationState gets identity and configuration at Scheduled; at the end
// the VMI's nodeName, launcherPod and activePods name the target; then the
// source Pod succeeds (its launcher quits after FinalizeMigration) and the
// VMI stays Running.
func TestHappyPath(t *testing.T) {
	ns := newNamespace(t, "happy")
	startControllers(t, ns, &Config{Policy: DefaultPolicy()})
	vmi := startVMI(t, ns, "vm", corev1.ConditionTrue)
	source := getPod(t, ns, vmi.Status.LauncherPod)
	m := createMigration(t, ns, "mig", "vm")

	waitMigration(t, ns, "mig", "Scheduling", inPhase(v1.MigrationScheduling))
	got := waitMigration(t, ns, "mig", "finalizer", func(m *v1.VirtualMachineInstanceMigration) bool {
		return slices.Contains(m.Finalizers, Finalizer)
	})
	if len(got.Status.PhaseTransitionTimestamps) < 2 || got.Status.PhaseTransitionTimestamps[0].Phase != v1.MigrationPending {
		t.Errorf("phase timestamps %+v", got.Status.PhaseTransitionTimestamps)
	}
	target := targetOf(t, ns, m)
	if target.Name == source.Name || target.Labels[launcherpod.CreatedByLabel] != string(vmi.UID) {
		t.Errorf("target %s labels %v (source %s)", target.Name, target.Labels, source.Name)
	}
	if ref := metav1.GetControllerOf(target); ref == nil || ref.UID != vmi.UID {
		t.Errorf("target owner %+v", target.OwnerReferences)
	}
	terms := target.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 || len(terms[0].MatchFields) != 1 || terms[0].MatchFields[0].Values[0] != sourceNode ||
		terms[0].MatchFields[0].Operator != corev1.NodeSelectorOpNotIn {
		t.Errorf("target affinity %+v, want NotIn %s", terms, sourceNode)
	}
	if fmt.Sprint(target.Spec.Containers[0].Args) != fmt.Sprint(source.Spec.Containers[0].Args) ||
		!target.Spec.Containers[0].Resources.Requests.Memory().Equal(*source.Spec.Containers[0].Resources.Requests.Memory()) {
		t.Errorf("target compute container differs from the source's")
	}
	// The VMI controller takes no target Pod for the launcher Pod.
	if v := getVMI(t, ns, "vm"); v.Status.LauncherPod != source.Name {
		t.Errorf("launcherPod %q during the migration", v.Status.LauncherPod)
	}

	bind(t, target, targetNode)
	waitMigration(t, ns, "mig", "Scheduled", inPhase(v1.MigrationScheduled))
	ms := getVMI(t, ns, "vm").Status.MigrationState
	if ms == nil || ms.MigrationUID != m.UID || ms.SourceNode != sourceNode || ms.SourcePod != source.Name ||
		ms.TargetNode != targetNode || ms.TargetPod != target.Name || ms.MigrationConfiguration == nil ||
		*ms.MigrationConfiguration.CompletionTimeoutPerGiB != 150 || *ms.MigrationConfiguration.AllowPostCopy {
		t.Fatalf("migrationState at Scheduled: %+v", ms)
	}
	setPodStatus(t, ns, target.Name, podRunning)
	waitMigration(t, ns, "mig", "PreparingTarget", inPhase(v1.MigrationPreparingTarget))
	setState(t, ns, "vm", func(ms *v1.VirtualMachineInstanceMigrationState) {
		ms.TargetNodeAddress, ms.TargetMigrationPort, ms.TargetNodeDomainDetected = "10.250.0.12", 4444, true
	})
	waitMigration(t, ns, "mig", "TargetReady", inPhase(v1.MigrationTargetReady))
	setState(t, ns, "vm", func(ms *v1.VirtualMachineInstanceMigrationState) {
		now := metav1.Now()
		ms.StartTimestamp = &now
	})
	waitMigration(t, ns, "mig", "Running", inPhase(v1.MigrationRunning))
	complete(t, ns, "vm")
	done := waitMigration(t, ns, "mig", "Succeeded and no finalizer", func(m *v1.VirtualMachineInstanceMigration) bool {
		return m != nil && m.Status.Phase == v1.MigrationSucceeded && !slices.Contains(m.Finalizers, Finalizer)
	})
	if done.Status.MigrationState == nil || !done.Status.MigrationState.Completed || done.Status.MigrationState.EndTimestamp == nil {
		t.Errorf("the migration's mirrored state %+v", done.Status.MigrationState)
	}
	after := getVMI(t, ns, "vm")
	if after.Status.NodeName != targetNode || after.Status.LauncherPod != target.Name ||
		after.Status.ActivePods[target.UID] != targetNode || after.Status.MigrationState.EndTimestamp == nil ||
		after.Status.Phase != v1.Running {
		t.Fatalf("VMI after the handoff: %+v", after.Status)
	}
	waitEvent(t, ns, "mig", "Succeeded", targetNode)
	waitEvent(t, ns, "mig", "Scheduled", targetNode)

	// The source launcher quits after FinalizeMigration: its Pod succeeds.
	setPodStatus(t, ns, source.Name, func(s *corev1.PodStatus) { s.Phase = corev1.PodSucceeded })
	consistently(t, 3*time.Second, "the VMI after its source Pod ended", func() error {
		v := getVMI(t, ns, "vm")
		if v.Status.Phase != v1.Running || v.Status.LauncherPod != target.Name || v.Status.NodeName != targetNode {
			return fmt.Errorf("phase %s launcherPod %s node %s", v.Status.Phase, v.Status.LauncherPod, v.Status.NodeName)
		}
		return nil
	})
}

// TestSourceEndsBeforeHandoff: the source node agent may finalize (the
// source Pod succeeds) before the controller wrote the handoff; the VMI
// controller alone (no migration controller runs) must not end the VMI
// whose completed migrationState names the Pod as its source.
func TestSourceEndsBeforeHandoff(t *testing.T) {
	ns := newNamespace(t, "early")
	startControllers(t, ns, nil)
	vmi := startVMI(t, ns, "vm", corev1.ConditionTrue)
	setVMIStatus(t, ns, "vm", func(s *v1.VirtualMachineInstanceStatus) {
		now := metav1.Now()
		s.MigrationState = &v1.VirtualMachineInstanceMigrationState{MigrationUID: "m1", SourceNode: sourceNode,
			SourcePod: vmi.Status.LauncherPod, TargetNode: targetNode, TargetPod: "elsewhere", Completed: true,
			TargetNodeDomainReadyTimestamp: &now}
	})
	setPodStatus(t, ns, vmi.Status.LauncherPod, func(s *corev1.PodStatus) { s.Phase = corev1.PodSucceeded })
	consistently(t, 3*time.Second, "the VMI after its source Pod ended", func() error {
		if v := getVMI(t, ns, "vm"); v.Status.Phase != v1.Running {
			return fmt.Errorf("phase %s reason %s", v.Status.Phase, v.Status.Reason)
		}
		return nil
	})
}

// TestRefused: a VMI that is not LiveMigratable, and one that does not
// exist, fail their migration at once with a condition and an event; no
// target Pod is made.
func TestRefused(t *testing.T) {
	ns := newNamespace(t, "refused")
	startControllers(t, ns, &Config{})
	startVMI(t, ns, "vm", corev1.ConditionFalse)
	createMigration(t, ns, "mig", "vm")
	m := waitMigration(t, ns, "mig", "Failed", inPhase(v1.MigrationFailed))
	if c := condition(m, ConditionFailed); c == nil || c.Reason != ReasonVMINotMigratable {
		t.Errorf("conditions %+v", m.Status.Conditions)
	}
	waitEvent(t, ns, "mig", "Failed", "not live migratable")
	createMigration(t, ns, "nothing", "absent")
	m = waitMigration(t, ns, "nothing", "Failed", inPhase(v1.MigrationFailed))
	if c := condition(m, ConditionFailed); c == nil || c.Reason != ReasonVMINotFound {
		t.Errorf("conditions %+v", m.Status.Conditions)
	}
	waitMigration(t, ns, "mig", "no finalizer", func(m *v1.VirtualMachineInstanceMigration) bool {
		return m != nil && !slices.Contains(m.Finalizers, Finalizer)
	})
	if pods := targetPods(t, ns); len(pods) != 0 {
		t.Errorf("%d target Pods", len(pods))
	}
}

// TestParallelLimit: with parallelMigrationsPerCluster 1, three
// migrations of three VMIs run one after the other: never two target Pods
// of unfinished migrations at once, the waiting ones Pending with
// WaitingForLimits.
func TestParallelLimit(t *testing.T) {
	ns := newNamespace(t, "limit")
	startControllers(t, ns, &Config{Limits: Limits{PerCluster: 1, OutboundPerNode: 2}, LimitRetry: 200 * time.Millisecond})
	names := []string{"vm0", "vm1", "vm2"}
	for _, n := range names {
		startVMI(t, ns, n, corev1.ConditionTrue)
	}
	// A watcher: target Pods of migrations not Succeeded, never two.
	stop := make(chan struct{})
	violation := make(chan string, 1)
	watcherDone := make(chan struct{})
	go func() {
		defer close(watcherDone)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if n, which := liveTargets(t, ns); n > 1 {
				select {
				case violation <- which:
				default:
				}
				return
			}
		}
	}()
	migs := map[string]*v1.VirtualMachineInstanceMigration{}
	for _, n := range names {
		migs[n] = createMigration(t, ns, "mig-"+n, n)
	}
	for range names {
		// Exactly one is admitted; the others wait.
		var admitted string
		poll(t, "one admitted migration", func(ctxt context.Context) (bool, error) {
			admitted = ""
			list, err := kemu.KemuV1alpha1().VirtualMachineInstanceMigrations(ns).List(ctxt, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			for _, m := range list.Items {
				if m.Status.Phase == v1.MigrationScheduling {
					admitted = m.Spec.VMIName
				}
			}
			return admitted != "", nil
		})
		for _, n := range names {
			m := getMigration(t, ns, "mig-"+n)
			if n == admitted || m.Status.Phase == v1.MigrationSucceeded {
				continue
			}
			// Not yet seen by the controller (no phase) or waiting; never
			// further while another one runs.
			if m.Status.Phase != v1.MigrationPending && m.Status.Phase != v1.MigrationPhaseUnset {
				t.Fatalf("%s is %s while %s runs", m.Name, m.Status.Phase, admitted)
			}
			waitMigration(t, ns, m.Name, "WaitingForLimits", func(m *v1.VirtualMachineInstanceMigration) bool {
				c := condition(m, ConditionWaitingForLimits)
				return c != nil && c.Reason == ReasonOverLimit
			})
		}
		driveToRunning(t, ns, admitted, migs[admitted])
		complete(t, ns, admitted)
		waitMigration(t, ns, "mig-"+admitted, "Succeeded", inPhase(v1.MigrationSucceeded))
	}
	close(stop)
	<-watcherDone
	select {
	case which := <-violation:
		t.Fatalf("two target Pods at once: %s", which)
	default:
	}
}

func getMigration(t *testing.T, ns, name string) *v1.VirtualMachineInstanceMigration {
	t.Helper()
	m, err := kemu.KemuV1alpha1().VirtualMachineInstanceMigrations(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// liveTargets counts the target Pods (not being deleted) of migrations not
// Succeeded. Pods are listed first: a Pod created after a migration ended
// is then never counted against that migration's stale phase.
func liveTargets(t *testing.T, ns string) (int, string) {
	pods, err := kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: launcherpod.MigrationUIDLabel})
	if err != nil {
		return 0, ""
	}
	list, err := kemu.KemuV1alpha1().VirtualMachineInstanceMigrations(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return 0, ""
	}
	succeeded := map[string]bool{}
	for _, m := range list.Items {
		succeeded[string(m.UID)] = m.Status.Phase == v1.MigrationSucceeded
	}
	var live []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && !succeeded[p.Labels[launcherpod.MigrationUIDLabel]] {
			live = append(live, p.Name)
		}
	}
	return len(live), fmt.Sprint(live)
}

// TestCancelBeforeTargetReady: deleting a migration at Scheduled deletes
// its target Pod, marks the VMI's migrationState failed (Aborted) and lets
// the migration go; the VMI keeps running on the source.
func TestCancelBeforeTargetReady(t *testing.T) {
	ns := newNamespace(t, "cancel-early")
	startControllers(t, ns, &Config{})
	vmi := startVMI(t, ns, "vm", corev1.ConditionTrue)
	m := createMigration(t, ns, "mig", "vm")
	waitMigration(t, ns, "mig", "Scheduling", inPhase(v1.MigrationScheduling))
	target := targetOf(t, ns, m)
	bind(t, target, targetNode)
	waitMigration(t, ns, "mig", "Scheduled", inPhase(v1.MigrationScheduled))
	deleteMigration(t, ns, "mig")
	podDeleted(t, ns, target.Name)
	waitMigration(t, ns, "mig", "gone", func(m *v1.VirtualMachineInstanceMigration) bool { return m == nil })
	after := getVMI(t, ns, "vm")
	if ms := after.Status.MigrationState; ms == nil || !ms.Failed || ms.FailureReason != ReasonAborted || ms.EndTimestamp == nil {
		t.Errorf("migrationState after the cancel: %+v", ms)
	}
	if after.Status.Phase != v1.Running || after.Status.NodeName != sourceNode || after.Status.LauncherPod != vmi.Status.LauncherPod {
		t.Errorf("VMI after the cancel: %+v", after.Status)
	}
	// Canceled before its Pod: a waiting migration just goes too.
	createMigration(t, ns, "again", "vm")
	waitMigration(t, ns, "again", "Scheduling", inPhase(v1.MigrationScheduling))
}

// TestCancelAfterTargetReady: deleting a running migration asks the source
// node agent to abort (abortRequested, abortStatus Aborting); the
// migration stays (finalizer) until the agent reports the abort, then it
// fails, its target Pod is deleted and it goes.
func TestCancelAfterTargetReady(t *testing.T) {
	ns := newNamespace(t, "cancel-late")
	startControllers(t, ns, &Config{})
	startVMI(t, ns, "vm", corev1.ConditionTrue)
	m := createMigration(t, ns, "mig", "vm")
	target := driveToRunning(t, ns, "vm", m)
	deleteMigration(t, ns, "mig")
	waitVMI(t, ns, "vm", "abortRequested", func(v *v1.VirtualMachineInstance) bool {
		ms := v.Status.MigrationState
		return ms != nil && ms.AbortRequested && ms.AbortStatus == v1.MigrationAbortInProgress
	})
	got := waitMigration(t, ns, "mig", "AbortRequested condition", func(m *v1.VirtualMachineInstanceMigration) bool {
		return m != nil && condition(m, ConditionAbortRequested) != nil
	})
	if got.Status.Phase != v1.MigrationRunning || getPod(t, ns, target.Name).DeletionTimestamp != nil {
		t.Errorf("before the agent answered: phase %s, target Pod deleted", got.Status.Phase)
	}
	setState(t, ns, "vm", func(ms *v1.VirtualMachineInstanceMigrationState) { // the source agent canceled
		now := metav1.Now()
		ms.AbortStatus, ms.Failed, ms.FailureReason, ms.EndTimestamp = v1.MigrationAbortSucceeded, true, "canceled", &now
	})
	podDeleted(t, ns, target.Name)
	waitMigration(t, ns, "mig", "gone", func(m *v1.VirtualMachineInstanceMigration) bool { return m == nil })
	if v := getVMI(t, ns, "vm"); v.Status.Phase != v1.Running || v.Status.NodeName != sourceNode {
		t.Errorf("VMI after the cancel: %+v", v.Status)
	}
}

// TestFailedMigration: a node agent reports the migration failed: the
// migration fails, its target Pod is deleted, the VMI keeps running on the
// source with its launcher Pod; the target Pod's deletion fails no VMI.
func TestFailedMigration(t *testing.T) {
	ns := newNamespace(t, "failed")
	startControllers(t, ns, &Config{})
	vmi := startVMI(t, ns, "vm", corev1.ConditionTrue)
	m := createMigration(t, ns, "mig", "vm")
	target := driveToRunning(t, ns, "vm", m)
	setState(t, ns, "vm", func(ms *v1.VirtualMachineInstanceMigrationState) {
		now := metav1.Now()
		ms.Failed, ms.FailureReason, ms.EndTimestamp = true, "MigrationFailed: target went away", &now
	})
	got := waitMigration(t, ns, "mig", "Failed", inPhase(v1.MigrationFailed))
	if c := condition(got, ConditionFailed); c == nil || c.Reason != ReasonMigrationFailed {
		t.Errorf("conditions %+v", got.Status.Conditions)
	}
	podDeleted(t, ns, target.Name)
	waitEvent(t, ns, "mig", "Failed", "target went away")
	consistently(t, 2*time.Second, "the VMI after a failed migration", func() error {
		v := getVMI(t, ns, "vm")
		if v.Status.Phase != v1.Running || v.Status.NodeName != sourceNode || v.Status.LauncherPod != vmi.Status.LauncherPod {
			return fmt.Errorf("%+v", v.Status)
		}
		return nil
	})
}

// TestVMIDeleted: deleting the VMI mid-migration deletes the target Pod
// with its other Pods (VMI controller) and fails the migration.
func TestVMIDeleted(t *testing.T) {
	ns := newNamespace(t, "vmi-deleted")
	startControllers(t, ns, &Config{})
	startVMI(t, ns, "vm", corev1.ConditionTrue)
	m := createMigration(t, ns, "mig", "vm")
	waitMigration(t, ns, "mig", "Scheduling", inPhase(v1.MigrationScheduling))
	target := targetOf(t, ns, m)
	bind(t, target, targetNode)
	waitMigration(t, ns, "mig", "Scheduled", inPhase(v1.MigrationScheduled))
	if err := kemu.KemuV1alpha1().VirtualMachineInstances(ns).Delete(context.Background(), "vm", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	podDeleted(t, ns, target.Name)
	got := waitMigration(t, ns, "mig", "Failed", inPhase(v1.MigrationFailed))
	if c := condition(got, ConditionFailed); c == nil || c.Reason != ReasonVMIFinal {
		t.Errorf("conditions %+v", got.Status.Conditions)
	}
}
