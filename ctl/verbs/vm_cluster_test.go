//go:build cluster

package verbs

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	kemuinformers "github.com/kemu-dev/kemu/api/client/informers/externalversions"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/controller/vm"
	"github.com/kemu-dev/kemu/test/cluster"
)

// TestStartStopRestart runs kemuctl start, stop and restart against a real
// kube-apiserver and kemu-api (in process) with the VM controller running (the VMI phases are set by
// hand, as the VMI controller and node agent would). Needs make k8s.
func TestStartStopRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := cluster.StartWithCRDs(ctx, t)
	startKemuAPI(ctx, t, c, nil)
	kube := kubernetes.NewForConfigOrDie(c.RESTConfig())
	kemu := versioned.NewForConfigOrDie(c.RESTConfig())
	ki := kubeinformers.NewSharedInformerFactory(kube, 0)
	vi := kemuinformers.NewSharedInformerFactory(kemu, 0)
	ctrl, err := vm.New(kube, kemu, ki, vi, &record.FakeRecorder{} /* discards events */, vm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ctrl.Run(runCtx, 2) }()
	t.Cleanup(func() { stop(); <-done })

	const ns = "default"
	kubectl := func(wantCode int, args ...string) string {
		t.Helper()
		stdout, stderr, code := run(t, "", append(args, "--kubeconfig", c.Kubeconfig)...)
		if code != wantCode {
			t.Fatalf("kemuctl %s: exit %d, want %d\n%s%s", strings.Join(args, " "), code, wantCode, stdout, stderr)
		}
		return stdout + stderr
	}
	mkVM := func(name string, rs v1.VirtualMachineRunStrategy) {
		obj := &v1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: v1.VirtualMachineSpec{
			RunStrategy: &rs,
			Template: &v1.VirtualMachineInstanceTemplateSpec{Spec: v1.VirtualMachineInstanceSpec{
				Domain: v1.DomainSpec{Memory: &v1.Memory{Guest: vmTestPtr(resource.MustParse("128Mi"))},
					Devices: v1.Devices{Disks: []v1.Disk{{Name: "root"}}}},
				Volumes: []v1.Volume{{Name: "root", ContainerDisk: &v1.ContainerDiskSource{Image: "quay.io/containerdisks/cirros:6.2"}}},
			}}}}
		if _, err := kemu.KemuV1alpha1().VirtualMachines(ns).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	getVM := func(name string) *v1.VirtualMachine {
		obj, err := kemu.KemuV1alpha1().VirtualMachines(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return obj
	}
	getVMI := func(name string) *v1.VirtualMachineInstance {
		vmi, err := kemu.KemuV1alpha1().VirtualMachineInstances(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		return vmi
	}
	poll := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true,
			func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
	// running waits for a VMI other than old and marks it Running.
	running := func(name string, old types.UID) types.UID {
		t.Helper()
		var vmi *v1.VirtualMachineInstance
		poll("a new VMI "+name, func() bool {
			vmi = getVMI(name)
			return vmi != nil && vmi.UID != old && vmi.DeletionTimestamp == nil
		})
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			v := getVMI(name)
			v.Status.Phase = v1.Running
			v.Status.PhaseTransitionTimestamps = []v1.VirtualMachineInstancePhaseTransitionTimestamp{{Phase: v1.Running, PhaseTransitionTimestamp: metav1.Now()}}
			v.Status.Conditions = []v1.VirtualMachineInstanceCondition{{Type: v1.VirtualMachineInstanceReady, Status: corev1.ConditionTrue}}
			_, err := kemu.KemuV1alpha1().VirtualMachineInstances(ns).UpdateStatus(ctx, v, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		poll(name+" Running", func() bool { return getVM(name).Status.PrintableStatus == v1.VirtualMachineStatusRunning })
		return vmi.UID
	}
	gone := func(name string) { t.Helper(); poll("VMI "+name+" gone", func() bool { return getVMI(name) == nil }) }

	// A Halted VM: start sets Always; start again refuses; restart replaces
	// the VMI; stop sets Halted; stop and restart then refuse.
	mkVM("a", v1.RunStrategyHalted)
	if out := kubectl(0, "start", "a", "-n", ns); !strings.Contains(out, "VM default/a was scheduled to start") {
		t.Errorf("start: %q", out)
	}
	if rs := getVM("a").Spec.RunStrategy; rs == nil || *rs != v1.RunStrategyAlways {
		t.Errorf("runStrategy after start: %v", rs)
	}
	uid := running("a", "")
	if out := kubectl(1, "start", "a"); !strings.Contains(out, "VM default/a is already running") {
		t.Errorf("start of a running VM: %q", out)
	}
	kubectl(0, "restart", "a", "-n", ns)
	running("a", uid)
	kubectl(0, "stop", "a", "-n", ns)
	if rs := getVM("a").Spec.RunStrategy; rs == nil || *rs != v1.RunStrategyHalted {
		t.Errorf("runStrategy after stop: %v", rs)
	}
	gone("a")
	if out := kubectl(1, "stop", "a"); !strings.Contains(out, "VM default/a is not running") {
		t.Errorf("stop of a stopped VM: %q", out)
	}
	if out := kubectl(1, "restart", "a"); !strings.Contains(out, "runStrategy Halted") {
		t.Errorf("restart of a Halted VM: %q", out)
	}

	// Manual: start and restart go through state change requests; stop
	// deletes the VMI and keeps Manual.
	mkVM("m", v1.RunStrategyManual)
	kubectl(0, "start", "m", "-n", ns)
	uid = running("m", "")
	kubectl(0, "restart", "m", "-n", ns)
	uid = running("m", uid)
	kubectl(0, "stop", "m", "-n", ns)
	gone("m")
	if rs := getVM("m").Spec.RunStrategy; *rs != v1.RunStrategyManual {
		t.Errorf("runStrategy after a Manual stop: %s", *rs)
	}
	poll("m Stopped", func() bool { return getVM("m").Status.PrintableStatus == v1.VirtualMachineStatusStopped })
	if getVMI("m") != nil {
		t.Error("a stopped Manual VM got a VMI back")
	}
	kubectl(0, "start", "m", "-n", ns)
	running("m", uid)

	// Always refuses start; errors name the VM; usage errors exit 2.
	mkVM("al", v1.RunStrategyAlways)
	if out := kubectl(1, "start", "al"); !strings.Contains(out, "VM default/al has runStrategy Always") {
		t.Errorf("start of an Always VM: %q", out)
	}
	if out := kubectl(1, "start", "nope", "-n", ns); !strings.Contains(out, "VM default/nope not found") {
		t.Errorf("start of a missing VM: %q", out)
	}
	kubectl(2, "start")
	if _, stderr, code := run(t, "", "stop", "a", "--kubeconfig", filepath.Join(t.TempDir(), "missing")); code != 1 ||
		!strings.Contains(stderr, "kubeconfig") {
		t.Errorf("missing kubeconfig: exit %d %q", code, stderr)
	}
}

func vmTestPtr[T any](v T) *T { return &v }
