//go:build cluster

package verbs

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/test/cluster"
)

// fakeMigrationController stands in for the controller and the node
// agents of a migration: a new VMIM goes through the phases to Running
// with progress in the VMI's migrationState; then, while complete is set,
// to Succeeded with the VMI on node2; a deleted VMIM (held by a finalizer)
// records an aborted migration and lets the object go.
type fakeMigrationController struct {
	complete atomic.Bool
	fail     atomic.Bool
}

const fakeMigrationFinalizer = "test.kemu.dev/migration"

func (f *fakeMigrationController) run(ctx context.Context, t *testing.T, kemu versioned.Interface, ns string) {
	vmims := kemu.KemuV1alpha1().VirtualMachineInstanceMigrations(ns)
	_ = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		list, err := vmims.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for i := range list.Items {
			f.step(ctx, t, kemu, &list.Items[i])
		}
		return false, nil
	})
}

func (f *fakeMigrationController) step(ctx context.Context, t *testing.T, kemu versioned.Interface, m *v1.VirtualMachineInstanceMigration) {
	vmims := kemu.KemuV1alpha1().VirtualMachineInstanceMigrations(m.Namespace)
	setVMI := func(mod func(*v1.VirtualMachineInstanceStatus)) {
		_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			vmi, err := kemu.KemuV1alpha1().VirtualMachineInstances(m.Namespace).Get(ctx, m.Spec.VMIName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			mod(&vmi.Status)
			_, err = kemu.KemuV1alpha1().VirtualMachineInstances(m.Namespace).UpdateStatus(ctx, vmi, metav1.UpdateOptions{})
			return err
		})
	}
	setPhase := func(p v1.VirtualMachineInstanceMigrationPhase, conds ...v1.VirtualMachineInstanceMigrationCondition) {
		m.Status.Phase = p
		m.Status.Conditions = conds
		if _, err := vmims.UpdateStatus(ctx, m, metav1.UpdateOptions{}); err != nil {
			t.Logf("fake controller: %v", err)
		}
	}
	switch {
	case m.DeletionTimestamp != nil:
		setVMI(func(s *v1.VirtualMachineInstanceStatus) {
			if s.MigrationState != nil {
				s.MigrationState.AbortStatus, s.MigrationState.Failed = v1.MigrationAbortSucceeded, true
			}
		})
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": nil, "resourceVersion": m.ResourceVersion}})
		_, _ = vmims.Patch(ctx, m.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	case m.Status.Phase == "":
		m.Finalizers = []string{fakeMigrationFinalizer}
		upd, err := vmims.Update(ctx, m, metav1.UpdateOptions{})
		if err != nil {
			return
		}
		*m = *upd
		setPhase(v1.MigrationScheduling)
	case m.Status.Phase == v1.MigrationScheduling:
		setVMI(func(s *v1.VirtualMachineInstanceStatus) {
			s.MigrationState = &v1.VirtualMachineInstanceMigrationState{MigrationUID: m.UID, SourceNode: s.NodeName, TargetNode: "node2",
				Statistics: &v1.MigrationStatistics{DataTotalBytes: 256 << 20, DataProcessedBytes: 64 << 20, DataRemainingBytes: 192 << 20, Passes: 1}}
		})
		setPhase(v1.MigrationRunning)
	case m.Status.Phase == v1.MigrationRunning && f.fail.Load():
		setVMI(func(s *v1.VirtualMachineInstanceStatus) {
			s.MigrationState.Failed, s.MigrationState.FailureReason = true, "the target launcher ended"
		})
		setPhase(v1.MigrationFailed, v1.VirtualMachineInstanceMigrationCondition{Type: "Failed", Status: "True", Reason: "TargetFailed", Message: "the target launcher ended"})
	case m.Status.Phase == v1.MigrationRunning && f.complete.Load():
		setVMI(func(s *v1.VirtualMachineInstanceStatus) {
			s.NodeName = "node2"
			s.MigrationState.Completed = true
			s.MigrationState.Statistics = &v1.MigrationStatistics{DataTotalBytes: 256 << 20, DataProcessedBytes: 100 << 20, Passes: 3,
				TotalMilliseconds: 850, DowntimeMilliseconds: 40}
		})
		setPhase(v1.MigrationSucceeded)
	}
}

// kemuctl migrate and migrate-cancel against a real API server and
// kemu-api (in process), the controller and node agents played by the
// test. Needs make k8s.
func TestMigrateAndCancel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := startCRDCluster(ctx, t, cluster.Options{})
	startKemuAPI(ctx, t, c, nil)
	kemu := versioned.NewForConfigOrDie(c.RESTConfig())
	const ns = "default"
	fake := &fakeMigrationController{}
	fakeCtx, stopFake := context.WithCancel(ctx)
	fakeDone := make(chan struct{})
	go func() { fake.run(fakeCtx, t, kemu, ns); close(fakeDone) }()
	t.Cleanup(func() { stopFake(); <-fakeDone })

	kemuctl := func(wantCode int, args ...string) string {
		t.Helper()
		stdout, stderr, code := run(t, "", append(args, "--kubeconfig", c.Kubeconfig)...)
		if code != wantCode {
			t.Fatalf("kemuctl %s: exit %d, want %d\n%s%s", strings.Join(args, " "), code, wantCode, stdout, stderr)
		}
		return stdout + stderr
	}
	expect := func(out string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("output %q lacks %q", out, w)
			}
		}
	}

	createVMI(ctx, t, kemu, ns, "a", v1.VirtualMachineInstanceStatus{Phase: v1.Running, NodeName: "node1"})
	// --wait follows the phases and progress to the end.
	go func() {
		_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, false, func(ctx context.Context) (bool, error) {
			vmi, err := kemu.KemuV1alpha1().VirtualMachineInstances(ns).Get(ctx, "a", metav1.GetOptions{})
			return err == nil && vmi.Status.MigrationState != nil, nil
		})
		// The fake's pacing, as fakeNodeAgent's delay: three of
		// kemuctl's reads (500 ms apart) see the migration Running.
		time.Sleep(3 * migratePollInterval)
		fake.complete.Store(true)
	}()
	expect(kemuctl(0, "migrate", "a", "--wait"), "VirtualMachineInstanceMigration default/a-migration-", "created for VMI default/a (from node node1)\n",
		"phase: Running\n", "memory: 64.0 MiB of 256.0 MiB transferred, 192.0 MiB remaining, pass 1\n",
		"VMI default/a migrated to node node2: total 850ms, downtime 40ms, 100.0 MiB transferred in 3 passes\n")

	// A failed migration: exit 1 with its reason.
	fake.complete.Store(false)
	fake.fail.Store(true)
	expect(kemuctl(1, "migrate", "a", "--wait"), "the migration a-migration-", "failed: TargetFailed: the target launcher ended\n")
	fake.fail.Store(false)

	// Without --wait: created, then canceled; the cancel waits until the
	// object is gone and reports where the VMI runs.
	expect(kemuctl(0, "migrate", "a"), "created for VMI default/a")
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		vmi, err := kemu.KemuV1alpha1().VirtualMachineInstances(ns).Get(ctx, "a", metav1.GetOptions{})
		return err == nil && vmi.Status.MigrationState != nil && !vmi.Status.MigrationState.Failed && !vmi.Status.MigrationState.Completed, nil
	}); err != nil {
		t.Fatal(err)
	}
	expect(kemuctl(0, "migrate-cancel", "a"), "cancel requested\n", "canceled; VMI default/a runs on node node2\n")
	expect(kemuctl(1, "migrate-cancel", "a"), "kemuctl migrate-cancel: VMI default/a has no migration in progress\n")

	// Refusals before anything is created.
	expect(kemuctl(1, "migrate", "nope"), "kemuctl migrate: VMI default/nope not found\n")
	createVMI(ctx, t, kemu, ns, "b", v1.VirtualMachineInstanceStatus{Phase: v1.Scheduled})
	expect(kemuctl(1, "migrate", "b"), "kemuctl migrate: VMI default/b is Scheduled, not Running: only a running VMI migrates\n")
	expect(kemuctl(2, "migrate", "a", "--timeout", "0s"), "--timeout 0s: want a positive duration")
}
