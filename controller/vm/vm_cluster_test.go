//go:build cluster

package vm

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	kemuinformers "github.com/kemu-dev/kemu/api/client/informers/externalversions"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/test/cluster"
)

var (
	shared *cluster.Cluster
	kube   kubernetes.Interface
	kemu   versioned.Interface
)

// TestMain starts one etcd + kube-apiserver + kube-controller-manager (for
// garbage collection) for the package and installs the CRDs. Missing
// binaries fail the run: make k8s builds them.
func TestMain(m *testing.M) {
	var err error
	shared, err = cluster.Start(context.Background(), cluster.Options{ControllerManager: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err, "(run make k8s)")
		os.Exit(1)
	}
	code := 1
	if err = installCRDs(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		kube = kubernetes.NewForConfigOrDie(shared.RESTConfig())
		kemu = versioned.NewForConfigOrDie(shared.RESTConfig())
		code = m.Run()
	}
	shared.Stop()
	os.Exit(code)
}

func installCRDs() error {
	return shared.InstallCRDs()
}

// recorder keeps events for assertions.
type recorder struct {
	mu     sync.Mutex
	events []string // "reason: message"
}

func (r *recorder) Event(_ runtime.Object, _, reason, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, reason+": "+msg)
}

func (r *recorder) Eventf(o runtime.Object, t, reason, f string, args ...any) {
	r.Event(o, t, reason, fmt.Sprintf(f, args...))
}

func (r *recorder) AnnotatedEventf(o runtime.Object, _ map[string]string, t, reason, f string, args ...any) {
	r.Eventf(o, t, reason, f, args...)
}

func (r *recorder) count(reason string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if strings.HasPrefix(e, reason+":") {
			n++
		}
	}
	return n
}

// testOptions: short, jitter-free back-off (2 s, 4 s, 8 s).
var testOptions = Options{StartBackoffBase: 2 * time.Second, StartBackoffMax: 8 * time.Second, StartBackoffJitter: -1}

// newController builds a controller on fresh informers; run says whether
// its workers run (until the test ends).
func newController(t *testing.T, run bool) (*Controller, *recorder) {
	t.Helper()
	ki := kubeinformers.NewSharedInformerFactory(kube, 0)
	vi := kemuinformers.NewSharedInformerFactory(kemu, 0)
	rec := &recorder{}
	c, err := New(kube, kemu, ki, vi, rec, testOptions)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	if run {
		go func() { done <- c.Run(ctx, 2) }()
	} else {
		ki.Start(ctx.Done())
		vi.Start(ctx.Done())
		vi.WaitForCacheSync(ctx.Done())
		close(done)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		ki.Shutdown()
		vi.Shutdown()
	})
	return c, rec
}

func namespace(t *testing.T) string {
	t.Helper()
	name := strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	if _, err := kube.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

func newVM(ns, name string, rs v1.VirtualMachineRunStrategy) *v1.VirtualMachine {
	return &v1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1.VirtualMachineSpec{
			RunStrategy: &rs,
			Template: &v1.VirtualMachineInstanceTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec: v1.VirtualMachineInstanceSpec{
					Domain: v1.DomainSpec{
						Memory:  &v1.Memory{Guest: ptr(mustQuantity("128Mi"))},
						Devices: v1.Devices{Disks: []v1.Disk{{Name: "root"}}},
					},
					Volumes: []v1.Volume{{Name: "root",
						ContainerDisk: &v1.ContainerDiskSource{Image: "quay.io/containerdisks/cirros:6.2"}}},
				},
			},
		},
	}
}

func createVM(t *testing.T, vm *v1.VirtualMachine) *v1.VirtualMachine {
	t.Helper()
	vm, err := kemu.KemuV1alpha1().VirtualMachines(vm.Namespace).Create(context.Background(), vm, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return vm
}

func getVM(t *testing.T, ns, name string) *v1.VirtualMachine {
	t.Helper()
	vm, err := kemu.KemuV1alpha1().VirtualMachines(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return vm
}

// getVMI returns the VMI, nil when there is none.
func getVMI(t *testing.T, ns, name string) *v1.VirtualMachineInstance {
	t.Helper()
	vmi, err := kemu.KemuV1alpha1().VirtualMachineInstances(ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return vmi
}

// eventually polls cond until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, timeout, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}

// consistently checks cond holds for d.
func consistently(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, d, true,
		func(context.Context) (bool, error) { return !cond(), nil })
	if err == nil {
		t.Fatalf("%s stopped holding", what)
	}
}

// waitVMI waits for a VMI whose UID is not one of old, and returns it.
func waitVMI(t *testing.T, ns, name string, old ...types.UID) *v1.VirtualMachineInstance {
	t.Helper()
	var vmi *v1.VirtualMachineInstance
	eventually(t, 30*time.Second, "a new VMI "+name, func() bool {
		vmi = getVMI(t, ns, name)
		if vmi == nil || vmi.DeletionTimestamp != nil {
			return false
		}
		for _, u := range old {
			if vmi.UID == u {
				return false
			}
		}
		return true
	})
	return vmi
}

func waitNoVMI(t *testing.T, ns, name string) {
	t.Helper()
	eventually(t, 30*time.Second, "VMI "+name+" gone", func() bool { return getVMI(t, ns, name) == nil })
}

func waitStatus(t *testing.T, ns, name string, want v1.VirtualMachinePrintableStatus) *v1.VirtualMachine {
	t.Helper()
	var vm *v1.VirtualMachine
	eventually(t, 30*time.Second, fmt.Sprintf("VM %s printableStatus %s", name, want), func() bool {
		vm = getVM(t, ns, name)
		return vm.Status.PrintableStatus == want
	})
	return vm
}

// setPhase drives the VMI's status as the VMI controller and node agent
// would: phase (with its transition timestamp) and conditions.
func setPhase(t *testing.T, ns, name string, phase v1.VirtualMachineInstancePhase, conds ...v1.VirtualMachineInstanceCondition) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		vmi, err := kemu.KemuV1alpha1().VirtualMachineInstances(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		vmi.Status.Phase = phase
		vmi.Status.PhaseTransitionTimestamps = append(vmi.Status.PhaseTransitionTimestamps,
			v1.VirtualMachineInstancePhaseTransitionTimestamp{Phase: phase, PhaseTransitionTimestamp: metav1.Now()})
		if phase == v1.Scheduled || phase == v1.Running {
			vmi.Status.NodeName = "node-1"
		}
		vmi.Status.Conditions = conds
		_, err = kemu.KemuV1alpha1().VirtualMachineInstances(ns).UpdateStatus(context.Background(), vmi, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

var readyTrue = v1.VirtualMachineInstanceCondition{Type: v1.VirtualMachineInstanceReady, Status: corev1.ConditionTrue}

func condition(vm *v1.VirtualMachine, t v1.VirtualMachineConditionType) *v1.VirtualMachineCondition {
	for i := range vm.Status.Conditions {
		if vm.Status.Conditions[i].Type == t {
			return &vm.Status.Conditions[i]
		}
	}
	return nil
}

// uidWatcher collects the UIDs of every VMI created in a namespace.
type uidWatcher struct {
	mu   sync.Mutex
	uids map[types.UID]bool
}

func watchUIDs(t *testing.T, ns string) *uidWatcher {
	t.Helper()
	w, err := kemu.KemuV1alpha1().VirtualMachineInstances(ns).Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u := &uidWatcher{uids: map[types.UID]bool{}}
	go func() {
		for ev := range w.ResultChan() {
			if vmi, ok := ev.Object.(*v1.VirtualMachineInstance); ok && ev.Type == watch.Added {
				u.mu.Lock()
				u.uids[vmi.UID] = true
				u.mu.Unlock()
			}
		}
	}()
	t.Cleanup(w.Stop)
	return u
}

func (u *uidWatcher) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.uids)
}

// TestAlways: the VMI is created from the template and owned by the VM;
// status follows its phases and conditions; a VMI that ended is replaced at
// once after a run, with a growing back-off (CrashLoopBackOff) after failed
// starts; a successful run clears the back-off.
func TestAlways(t *testing.T) {
	ns := namespace(t)
	newController(t, true)
	vm := createVM(t, newVM(ns, "always", v1.RunStrategyAlways))

	vmi := waitVMI(t, ns, "always")
	ref := metav1.GetControllerOf(vmi)
	if ref == nil || ref.UID != vm.UID || ref.Kind != "VirtualMachine" || vmi.Labels["app"] != "always" {
		t.Fatalf("VMI owner %+v labels %v", ref, vmi.Labels)
	}
	eventually(t, 30*time.Second, "Starting, created", func() bool {
		st := getVM(t, ns, "always").Status
		return st.PrintableStatus == v1.VirtualMachineStatusStarting && st.Created && !st.Ready &&
			st.RunStrategy == v1.RunStrategyAlways
	})
	setPhase(t, ns, "always", v1.Scheduling, v1.VirtualMachineInstanceCondition{Type: "PodScheduled",
		Status: corev1.ConditionFalse, Reason: "Unschedulable"})
	waitStatus(t, ns, "always", v1.VirtualMachineStatusUnschedulable)
	setPhase(t, ns, "always", v1.Scheduled)
	waitStatus(t, ns, "always", v1.VirtualMachineStatusStarting)
	setPhase(t, ns, "always", v1.Running, readyTrue)
	got := waitStatus(t, ns, "always", v1.VirtualMachineStatusRunning)
	if c := condition(got, v1.VirtualMachineReady); !got.Status.Ready || c == nil || c.Status != corev1.ConditionTrue {
		t.Errorf("running: ready %v, Ready condition %+v", got.Status.Ready, c)
	}
	setPhase(t, ns, "always", v1.Running, readyTrue, v1.VirtualMachineInstanceCondition{
		Type: v1.VirtualMachineInstancePaused, Status: corev1.ConditionTrue, Reason: "PausedByUser"})
	got = waitStatus(t, ns, "always", v1.VirtualMachineStatusPaused)
	if c := condition(got, v1.VirtualMachinePaused); c == nil || c.Reason != "PausedByUser" {
		t.Errorf("Paused condition not mirrored: %+v", got.Status.Conditions)
	}

	// The guest powers off after running: a new VMI at once, no back-off.
	setPhase(t, ns, "always", v1.Succeeded)
	vmi = waitVMI(t, ns, "always", vmi.UID)
	if sf := StartFailureOf(getVM(t, ns, "always")); sf != nil {
		t.Errorf("start failure recorded after a run: %+v", sf)
	}

	// Three failed starts: 2 s, 4 s, 8 s.
	uids := []types.UID{vmi.UID}
	for i, want := range []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second} {
		setPhase(t, ns, "always", v1.Scheduling)
		failed := time.Now()
		setPhase(t, ns, "always", v1.Failed)
		var sf *StartFailure
		eventually(t, 30*time.Second, "start failure recorded", func() bool {
			sf = StartFailureOf(getVM(t, ns, "always"))
			return sf != nil && sf.ConsecutiveFailCount == i+1
		})
		// status.startFailure.retryAfterTimestamp is stored to the second.
		if d := sf.RetryAfter.Sub(failed); d < want-time.Second || d > want+2*time.Second {
			t.Errorf("failure %d: back-off %s after the VMI failed, want %s", i+1, d, want)
		}
		if i > 0 { // the first window is short; it is asserted by the unit tests
			waitStatus(t, ns, "always", v1.VirtualMachineStatusCrashLoopBackOff)
		}
		vmi = waitVMI(t, ns, "always", uids...)
		uids = append(uids, vmi.UID)
		if vmi.CreationTimestamp.Time.Before(sf.RetryAfter.Truncate(time.Second)) {
			t.Errorf("failure %d: new VMI created at %s, before the back-off ended at %s", i+1,
				vmi.CreationTimestamp.Time, sf.RetryAfter)
		}
	}
	// A successful run clears it.
	setPhase(t, ns, "always", v1.Running, readyTrue)
	waitStatus(t, ns, "always", v1.VirtualMachineStatusRunning)
	eventually(t, 10*time.Second, "start failure cleared", func() bool {
		return StartFailureOf(getVM(t, ns, "always")) == nil
	})
}

// TestRerunOnFailure: a failed VMI is replaced, a succeeded one deleted and
// not replaced.
func TestRerunOnFailure(t *testing.T) {
	ns := namespace(t)
	newController(t, true)
	createVM(t, newVM(ns, "rerun", v1.RunStrategyRerunOnFailure))
	vmi := waitVMI(t, ns, "rerun")
	setPhase(t, ns, "rerun", v1.Running, readyTrue)
	waitStatus(t, ns, "rerun", v1.VirtualMachineStatusRunning)
	setPhase(t, ns, "rerun", v1.Failed)
	vmi2 := waitVMI(t, ns, "rerun", vmi.UID)
	eventually(t, 10*time.Second, "start request done", func() bool {
		return len(getVM(t, ns, "rerun").Status.StateChangeRequests) == 0
	})
	setPhase(t, ns, "rerun", v1.Running, readyTrue)
	setPhase(t, ns, "rerun", v1.Succeeded)
	waitNoVMI(t, ns, "rerun")
	eventually(t, 30*time.Second, "Stopped, not created", func() bool {
		st := getVM(t, ns, "rerun").Status
		return st.PrintableStatus == v1.VirtualMachineStatusStopped && !st.Created && !st.Ready
	})
	consistently(t, 2*time.Second, "no VMI after Succeeded", func() bool { return getVMI(t, ns, "rerun") == nil })
	if vmi2.UID == vmi.UID {
		t.Error("the failed VMI was not replaced")
	}
}

// TestOnce: one VMI, kept whatever its end.
func TestOnce(t *testing.T) {
	ns := namespace(t)
	newController(t, true)
	createVM(t, newVM(ns, "once", v1.RunStrategyOnce))
	vmi := waitVMI(t, ns, "once")
	setPhase(t, ns, "once", v1.Failed)
	waitStatus(t, ns, "once", v1.VirtualMachineStatusStopped)
	consistently(t, 2*time.Second, "the failed VMI stays", func() bool {
		v := getVMI(t, ns, "once")
		return v != nil && v.UID == vmi.UID && v.DeletionTimestamp == nil
	})
}

// TestManualAndHalted: Manual starts and stops on requests only; Halted
// deletes the VMI; changing the strategy acts at once.
func TestManualAndHalted(t *testing.T) {
	ns := namespace(t)
	newController(t, true)
	createVM(t, newVM(ns, "manual", v1.RunStrategyManual))
	waitStatus(t, ns, "manual", v1.VirtualMachineStatusStopped)
	consistently(t, time.Second, "no VMI without a request", func() bool { return getVMI(t, ns, "manual") == nil })

	request := func(reqs ...v1.VirtualMachineStateChangeRequest) {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			vm := getVM(t, ns, "manual")
			vm.Status.StateChangeRequests = reqs
			_, err := kemu.KemuV1alpha1().VirtualMachines(ns).UpdateStatus(context.Background(), vm, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	request(startReq)
	vmi := waitVMI(t, ns, "manual")
	setPhase(t, ns, "manual", v1.Running, readyTrue)
	waitStatus(t, ns, "manual", v1.VirtualMachineStatusRunning)
	if reqs := getVM(t, ns, "manual").Status.StateChangeRequests; len(reqs) != 0 {
		t.Errorf("start request not trimmed: %+v", reqs)
	}
	request(stopOf(string(vmi.UID)))
	waitNoVMI(t, ns, "manual")
	var vm *v1.VirtualMachine
	eventually(t, 30*time.Second, "Stopped, not created", func() bool {
		vm = getVM(t, ns, "manual")
		return vm.Status.PrintableStatus == v1.VirtualMachineStatusStopped && !vm.Status.Created
	})
	if c := condition(vm, v1.VirtualMachineReady); c == nil || c.Status != corev1.ConditionFalse || c.Reason != "VMINotExists" {
		t.Errorf("Ready condition without VMI: %+v", c)
	}
	eventually(t, 10*time.Second, "stop request trimmed", func() bool {
		return len(getVM(t, ns, "manual").Status.StateChangeRequests) == 0
	})

	// Halted -> Always -> Halted.
	setStrategy := func(rs v1.VirtualMachineRunStrategy) {
		patch := fmt.Sprintf(`{"spec":{"runStrategy":%q}}`, rs)
		if _, err := kemu.KemuV1alpha1().VirtualMachines(ns).Patch(context.Background(), "manual",
			types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setStrategy(v1.RunStrategyHalted)
	consistently(t, time.Second, "Halted creates nothing", func() bool { return getVMI(t, ns, "manual") == nil })
	setStrategy(v1.RunStrategyAlways)
	waitVMI(t, ns, "manual")
	setStrategy(v1.RunStrategyHalted)
	waitNoVMI(t, ns, "manual")
	eventually(t, 30*time.Second, "Stopped, not created, Halted", func() bool {
		st := getVM(t, ns, "manual").Status
		return st.PrintableStatus == v1.VirtualMachineStatusStopped && !st.Created && st.RunStrategy == v1.RunStrategyHalted
	})
}

// TestExpectationsBurst reconciles one VM many times in a row, faster than
// the informer reports the VMI it created (or deleted): only one VMI is
// created per start, and no create fails.
func TestExpectationsBurst(t *testing.T) {
	ns := namespace(t)
	c, rec := newController(t, false)
	uids := watchUIDs(t, ns)
	vm := createVM(t, newVM(ns, "burst", v1.RunStrategyAlways))
	key := ns + "/burst"
	eventually(t, 10*time.Second, "VM in cache", func() bool {
		_, err := c.vmLister.VirtualMachines(ns).Get("burst")
		return err == nil
	})
	ctx := context.Background()
	for range 30 {
		if err := c.sync(ctx, key); err != nil {
			t.Fatalf("sync: %v", err)
		}
	}
	vmi := waitVMI(t, ns, "burst")
	// Fail it after a run: one delete, then exactly one new VMI.
	setPhase(t, ns, "burst", v1.Running)
	setPhase(t, ns, "burst", v1.Failed)
	eventually(t, 10*time.Second, "failed VMI in cache", func() bool {
		v, err := c.vmiLister.VirtualMachineInstances(ns).Get("burst")
		return err == nil && v.Status.Phase == v1.Failed
	})
	eventually(t, 30*time.Second, "a new VMI", func() bool {
		for range 10 {
			if err := c.sync(ctx, key); err != nil {
				t.Fatalf("sync: %v", err)
			}
		}
		v := getVMI(t, ns, "burst")
		return v != nil && v.UID != vmi.UID
	})
	for range 30 {
		if err := c.sync(ctx, key); err != nil {
			t.Fatalf("sync: %v", err)
		}
	}
	eventually(t, 10*time.Second, "the watch to see both VMIs", func() bool { return uids.count() >= 2 })
	consistently(t, time.Second, "two VMIs in all", func() bool { return uids.count() == 2 })
	if n := rec.count(ReasonFailedCreate); n > 0 {
		t.Errorf("%d failed creates: %v", n, rec.events)
	}
	if n := rec.count(ReasonCreated); n != 2 {
		t.Errorf("%d creates, want 2: %v", n, rec.events)
	}
	_ = vm
}

// TestInvalidTemplateAndDeletion: an invalid template is reported, not
// created; deleting a VM deletes its VMI.
func TestInvalidTemplateAndDeletion(t *testing.T) {
	ns := namespace(t)
	newController(t, true)
	bad := newVM(ns, "bad", v1.RunStrategyAlways)
	// A CPU model QEMU would take as a request for its help text: the
	// CRD's schema accepts it (its CEL rules refuse a disk without a
	// volume), api/validation refuses it.
	bad.Spec.Template.Spec.Domain.CPU = &v1.CPU{Model: "help"}
	createVM(t, bad)
	eventually(t, 30*time.Second, "Failure condition", func() bool {
		c := condition(getVM(t, ns, "bad"), v1.VirtualMachineFailure)
		return c != nil && c.Reason == ReasonInvalidTemplate && strings.Contains(c.Message, "spec.template.spec")
	})
	if getVMI(t, ns, "bad") != nil {
		t.Error("a VMI was created from an invalid template")
	}

	createVM(t, newVM(ns, "gone", v1.RunStrategyAlways))
	waitVMI(t, ns, "gone")
	fg := metav1.DeletePropagationForeground
	if err := kemu.KemuV1alpha1().VirtualMachines(ns).Delete(context.Background(), "gone",
		metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil {
		t.Fatal(err)
	}
	waitNoVMI(t, ns, "gone")
	eventually(t, 30*time.Second, "VM gone", func() bool {
		_, err := kemu.KemuV1alpha1().VirtualMachines(ns).Get(context.Background(), "gone", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

func ptr[T any](v T) *T { return &v }

func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }
