//go:build cluster

package evacuation

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	kemuinformers "github.com/kemu-dev/kemu/api/client/informers/externalversions"
	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/test/cluster"
)

// TestEvacuation: on a real kube-apiserver (Nodes and VMI status made by
// hand, no kubelet), VMIs that survive a drain get a PodDisruptionBudget
// over their launcher Pods (two while migrating), a cordoned node gets its
// LiveMigrate VMI a migration and its External VMI only the mark, a None
// VMI nothing; the mark goes once the VMI left the node, the budget once
// the VMI ended. Needs make k8s.
func TestEvacuation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cluster.StartWithCRDs(ctx, t)
	kube := kubernetes.NewForConfigOrDie(c.RESTConfig())
	kemu := versioned.NewForConfigOrDie(c.RESTConfig())
	const ns = "default"
	if _, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	setStatus := func(name string, mod func(*v1.VirtualMachineInstanceStatus)) {
		t.Helper()
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			vmi, err := kemu.KemuV1alpha1().VirtualMachineInstances(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			mod(&vmi.Status)
			_, err = kemu.KemuV1alpha1().VirtualMachineInstances(ns).UpdateStatus(ctx, vmi, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	mkVMI := func(name string, s v1.EvictionStrategy) *v1.VirtualMachineInstance {
		t.Helper()
		vmi, err := kemu.KemuV1alpha1().VirtualMachineInstances(ns).Create(ctx, &v1.VirtualMachineInstance{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec:       v1.VirtualMachineInstanceSpec{EvictionStrategy: &s},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		setStatus(name, func(st *v1.VirtualMachineInstanceStatus) {
			st.Phase, st.NodeName = v1.Running, "node-a"
			st.Conditions = []v1.VirtualMachineInstanceCondition{{Type: v1.VirtualMachineInstanceIsMigratable, Status: corev1.ConditionTrue}}
		})
		return vmi
	}
	live := mkVMI("live", v1.EvictionStrategyLiveMigrate)
	external := mkVMI("external", v1.EvictionStrategyExternal)
	none := mkVMI("none", v1.EvictionStrategyNone)

	ki := kubeinformers.NewSharedInformerFactory(kube, 0)
	vi := kemuinformers.NewSharedInformerFactory(kemu, 0)
	ctrl, err := New(kube, kemu, ki, vi, &record.FakeRecorder{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ctrl.Run(runCtx, 2) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	budgets := func(vmi *v1.VirtualMachineInstance) []policyv1.PodDisruptionBudget {
		l, err := kube.PolicyV1().PodDisruptionBudgets(ns).List(ctx, metav1.ListOptions{
			LabelSelector: labels.SelectorFromSet(labels.Set{BudgetForLabel: string(vmi.UID)}).String()})
		if err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	hasBudget := func(vmi *v1.VirtualMachineInstance, min int) func() bool {
		return func() bool {
			b := budgets(vmi)
			return len(b) == 1 && b[0].Spec.MinAvailable.IntValue() == min &&
				b[0].Spec.Selector.MatchLabels[launcherpod.CreatedByLabel] == string(vmi.UID) &&
				metav1.IsControlledBy(&b[0], vmi)
		}
	}
	evacuation := func(name string) string {
		vmi, err := kemu.KemuV1alpha1().VirtualMachineInstances(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return vmi.Status.EvacuationNodeName
	}
	migrationsOf := func(name string) []v1.VirtualMachineInstanceMigration {
		l, err := kemu.KemuV1alpha1().VirtualMachineInstanceMigrations(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []v1.VirtualMachineInstanceMigration
		for _, m := range l.Items {
			if m.Spec.VMIName == name {
				out = append(out, m)
			}
		}
		return out
	}
	poll := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true,
			func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("timed out waiting for %s", what)
		}
	}

	poll("live's budget", hasBudget(live, 1))
	poll("external's budget", hasBudget(external, 1))
	if b := budgets(none); len(b) != 0 {
		t.Errorf("evictionStrategy None got budgets: %v", b)
	}

	// kubectl cordon node-a.
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"unschedulable": true}})
	if _, err := kube.CoreV1().Nodes().Patch(ctx, "node-a", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	poll("live's evacuation migration", func() bool {
		m := migrationsOf("live")
		return len(m) == 1 && m[0].Labels[EvacuationLabel] == "node-a" && evacuation("live") == "node-a"
	})
	poll("external marked", func() bool { return evacuation("external") == "node-a" })
	if m := migrationsOf("external"); len(m) != 0 {
		t.Errorf("External got migrations: %v", m)
	}
	if m, e := migrationsOf("none"), evacuation("none"); len(m) != 0 || e != "" {
		t.Errorf("None got migrations %v, mark %q", m, e)
	}

	// The migration runs: both Pods are protected; it lands on node-b:
	// the mark goes and one Pod is protected again; no second migration.
	setStatus("live", func(st *v1.VirtualMachineInstanceStatus) {
		st.MigrationState = &v1.VirtualMachineInstanceMigrationState{MigrationUID: migrationsOf("live")[0].UID, SourceNode: "node-a",
			TargetNode: "node-b", TargetPod: "kemu-launcher-live-target"}
	})
	poll("live's budget of 2", hasBudget(live, 2))
	setStatus("live", func(st *v1.VirtualMachineInstanceStatus) {
		st.NodeName = "node-b"
		st.MigrationState.Completed = true
	})
	poll("live's mark cleared, budget 1", func() bool { return evacuation("live") == "" && hasBudget(live, 1)() })
	if m := migrationsOf("live"); len(m) != 1 {
		t.Errorf("live has %d migrations after it left the node, want 1", len(m))
	}

	// Uncordoned: the mark goes. Ended: the budget goes.
	patch, _ = json.Marshal(map[string]any{"spec": map[string]any{"unschedulable": false}})
	if _, err := kube.CoreV1().Nodes().Patch(ctx, "node-a", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	poll("external's mark cleared", func() bool { return evacuation("external") == "" })
	setStatus("external", func(st *v1.VirtualMachineInstanceStatus) { st.Phase = v1.Succeeded })
	poll("external's budget deleted", func() bool { return len(budgets(external)) == 0 })
}
