//go:build cluster

package vmi

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/controller"
	"github.com/kemu-dev/kemu/controller/template"
	kubeevents "github.com/kemu-dev/kemu/kube/events"
	"github.com/kemu-dev/kemu/test/cluster"
)

// One control plane (etcd + kube-apiserver, no scheduler or kubelet) for
// every test of the package: the tests play the scheduler (pods/binding) and
// the kubelet (Pod status) themselves.
var (
	shared *cluster.Cluster
	admin  kubeClients
)

const (
	launcherImage = "kemu.local/launcher:test"
	nodeName      = "node-1"
	pollTimeout   = 60 * time.Second
)

type kubeClients struct {
	kube kubernetes.Interface
	kemu versioned.Interface
}

func clientsFor(t testing.TB, cfg *rest.Config) kubeClients {
	t.Helper()
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	kemu, err := versioned.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kubeClients{kube, kemu}
}

func TestMain(m *testing.M) {
	ctx := context.Background()
	c, err := cluster.Start(ctx, cluster.Options{})
	if err != nil {
		// Missing binaries fail (with "run make k8s"), never skip.
		fmt.Fprintln(os.Stderr, "starting the test cluster:", err)
		os.Exit(1)
	}
	shared = c
	code := func() int {
		if err := c.InstallCRDs(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		cfg := c.RESTConfig()
		cfg.QPS, cfg.Burst = 500, 1000
		kube, _ := kubernetes.NewForConfig(cfg)
		kemu, _ := versioned.NewForConfig(cfg)
		admin = kubeClients{kube, kemu}
		// A node for the Bindings (the node agent would label it).
		_, err = kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName,
			Labels: map[string]string{v1.NodeSchedulableLabel: "true", v1.NodeKVMLabel: "false"}}}, metav1.CreateOptions{})
		if err != nil {
			fmt.Fprintln(os.Stderr, "creating the node:", err)
			return 1
		}
		return m.Run()
	}()
	c.Stop()
	os.Exit(code)
}

// writeCounter counts the API writes (POST, PUT, PATCH, DELETE) of a
// client by kind, conflicts separately.
type writeCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

func (w *writeCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if req.Method == http.MethodGet {
			return resp, err
		}
		kind := req.Method + " " + resourceOf(req.URL.Path)
		w.mu.Lock()
		if w.counts == nil {
			w.counts = map[string]int{}
		}
		w.counts[kind]++
		if err == nil && resp.StatusCode == http.StatusConflict {
			w.counts["conflicts"]++
		}
		w.mu.Unlock()
		return resp, err
	})
}

// resourceOf turns /apis/kemu.dev/v1alpha1/namespaces/ns/virtualmachineinstances/x/status
// into "virtualmachineinstances/status".
func resourceOf(p string) string {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	for i, s := range parts {
		if s == "namespaces" && i+2 < len(parts) {
			rest := parts[i+2:]
			if len(rest) >= 3 {
				return rest[0] + "/" + rest[2]
			}
			return rest[0]
		}
	}
	return p
}

func (w *writeCounter) snapshot() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]int{}
	for k, v := range w.counts {
		out[k] = v
	}
	return out
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// running is a controller started by startController.
type running struct {
	c      *Controller
	cancel context.CancelFunc
	done   chan struct{}
	writes *writeCounter
}

// stop ends the controller and waits for Run to return.
func (r *running) stop(t testing.TB) {
	t.Helper()
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the controller did not stop within 30s")
	}
}

// startController runs a VMI controller (its own informers, as a new
// process would have) whose writes are counted into w (a new counter when
// nil).
func startController(t testing.TB, namespace string, w *writeCounter) *running {
	return startControllerQPS(t, namespace, w, 50)
}

// startControllerQPS is startController with a client QPS (burst 2×QPS);
// kemu-controller's default is 50.
func startControllerQPS(t testing.TB, namespace string, w *writeCounter, qps float32) *running {
	return startControllerWith(t, namespace, w, qps, template.Options{LauncherImage: launcherImage})
}

// startControllerWith is startControllerQPS with the template's options
// (and mods applied to the controller's Config).
func startControllerWith(t testing.TB, namespace string, w *writeCounter, qps float32, opts template.Options, mods ...func(*Config)) *running {
	t.Helper()
	return startControllerCDI(t, namespace, w, qps, opts, 0, mods...)
}

// startControllerCDI is startControllerWith with, when cdiRecheck > 0, a
// DataVolume Watcher (as kemu-controller runs) asking discovery every
// cdiRecheck.
func startControllerCDI(t testing.TB, namespace string, w *writeCounter, qps float32, opts template.Options,
	cdiRecheck time.Duration, mods ...func(*Config)) *running {
	t.Helper()
	if w == nil {
		w = &writeCounter{}
	}
	cfg := shared.RESTConfig()
	cfg.QPS, cfg.Burst = qps, int(2*qps)
	cfg.Wrap(w.wrap)
	cl := clientsFor(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	recorder, stopRecorder, err := kubeevents.NewRecorder(ctx, cl.kube, "kemu-controller")
	if err != nil {
		t.Fatal(err)
	}
	inf := controller.NewInformers(cl.kube, cl.kemu, namespace, 0)
	if cdiRecheck > 0 {
		inf.WatchDataVolumes(cl.kube, dynamic.NewForConfigOrDie(cfg), cdiRecheck)
	}
	ccfg := Config{
		KubeClient: cl.kube, KemuClient: cl.kemu,
		VMIInformer:  inf.Kemu.Kemu().V1alpha1().VirtualMachineInstances(),
		PodInformer:  inf.LauncherPods.Core().V1().Pods(),
		NodeInformer: inf.Kube.Core().V1().Nodes(),
		PVCInformer:  inf.Kube.Core().V1().PersistentVolumeClaims(),
		Template:     template.NewService(opts),
		Recorder:     recorder,
		DataVolumes:  inf.DataVolumes,
	}
	for _, mod := range mods {
		mod(&ccfg)
	}
	c, err := New(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	inf.Start(ctx)
	r := &running{c: c, cancel: cancel, done: make(chan struct{}), writes: w}
	go func() {
		defer close(r.done)
		defer stopRecorder()
		defer inf.Shutdown()
		if err := c.Run(ctx, 4); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			r.stop(t)
		}
	})
	return r
}

func newNamespace(t testing.TB, prefix string) string {
	t.Helper()
	ns, err := admin.kube.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func newVMI(name string) *v1.VirtualMachineInstance {
	mem := resource.MustParse("128Mi")
	return &v1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "demo"}},
		Spec: v1.VirtualMachineInstanceSpec{
			Domain: v1.DomainSpec{
				Memory:  &v1.Memory{Guest: &mem},
				Devices: v1.Devices{Disks: []v1.Disk{{Name: "root", Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}}},
			},
			Volumes: []v1.Volume{{Name: "root", ContainerDisk: &v1.ContainerDiskSource{Image: "quay.io/containerdisks/cirros:6.2"}}},
		},
	}
}

func createVMI(t testing.TB, ns string, vmi *v1.VirtualMachineInstance) *v1.VirtualMachineInstance {
	t.Helper()
	out, err := admin.kemu.KemuV1alpha1().VirtualMachineInstances(ns).Create(context.Background(), vmi, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitVMI polls the VMI until cond holds (pollTimeout).
func waitVMI(t testing.TB, ns, name, what string, cond func(*v1.VirtualMachineInstance) bool) *v1.VirtualMachineInstance {
	t.Helper()
	var last *v1.VirtualMachineInstance
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, pollTimeout, true,
		func(ctx context.Context) (bool, error) {
			vmi, err := admin.kemu.KemuV1alpha1().VirtualMachineInstances(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			last = vmi
			return cond(vmi), nil
		})
	if err != nil {
		t.Fatalf("VMI %s/%s: waiting for %s: %v; last status: %+v", ns, name, what, err, statusOf(last))
	}
	return last
}

func statusOf(vmi *v1.VirtualMachineInstance) any {
	if vmi == nil {
		return nil
	}
	return vmi.Status
}

// launcherPods lists the launcher Pods of a namespace.
func launcherPods(t testing.TB, ns string) []corev1.Pod {
	t.Helper()
	pods, err := admin.kube.CoreV1().Pods(ns).List(context.Background(),
		metav1.ListOptions{LabelSelector: launcherpod.AppLabel + "=" + launcherpod.AppLauncher})
	if err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

func podOf(t testing.TB, vmi *v1.VirtualMachineInstance) *corev1.Pod {
	t.Helper()
	pod, err := admin.kube.CoreV1().Pods(vmi.Namespace).Get(context.Background(), vmi.Status.LauncherPod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// bind plays the scheduler.
func bind(t testing.TB, pod *corev1.Pod) {
	t.Helper()
	err := admin.kube.CoreV1().Pods(pod.Namespace).Bind(context.Background(), &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: nodeName},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// setPodStatus plays the kubelet (or the scheduler's condition): mutate the
// fresh Pod's status and write it.
func setPodStatus(t testing.TB, ns, name string, mutate func(*corev1.PodStatus)) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, pollTimeout, true,
		func(ctx context.Context) (bool, error) {
			pod, err := admin.kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			mutate(&pod.Status)
			_, err = admin.kube.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
			if apierrors.IsConflict(err) {
				return false, nil
			}
			return err == nil, err
		})
	if err != nil {
		t.Fatal(err)
	}
}

func condition(vmi *v1.VirtualMachineInstance, typ v1.VirtualMachineInstanceConditionType) *v1.VirtualMachineInstanceCondition {
	for i := range vmi.Status.Conditions {
		if vmi.Status.Conditions[i].Type == typ {
			return &vmi.Status.Conditions[i]
		}
	}
	return nil
}

func hasFinalizer(vmi *v1.VirtualMachineInstance) bool {
	for _, f := range vmi.Finalizers {
		if f == Finalizer {
			return true
		}
	}
	return false
}

func events(t testing.TB, ns, name string) []corev1.Event {
	t.Helper()
	var list *corev1.EventList
	// Events are sent asynchronously by the broadcaster.
	_ = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 10*time.Second, true,
		func(ctx context.Context) (bool, error) {
			var err error
			list, err = admin.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
			return err == nil && len(list.Items) > 0, nil
		})
	if list == nil {
		return nil
	}
	return list.Items
}

func waitEvent(t testing.TB, ns, name, reason, contains string) {
	t.Helper()
	var seen []string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 20*time.Second, true,
		func(ctx context.Context) (bool, error) {
			seen = nil
			for _, e := range events(t, ns, name) {
				seen = append(seen, e.Reason+": "+e.Message)
				if e.Reason == reason && strings.Contains(e.Message, contains) {
					return true, nil
				}
			}
			return false, nil
		})
	if err != nil {
		t.Fatalf("no event %s containing %q for %s/%s; seen %q", reason, contains, ns, name, seen)
	}
}

// TestLifecycle walks one VMI through every phase the controller owns:
// Scheduling (Pod created, finalizer, labels, owner), Pod unschedulable
// (condition PodScheduled False with the scheduler's reason), bound →
// Scheduled (nodeName, activePods), image pull error (Synchronized False),
// the node agent's Running status kept, the Pod OOMKilled → Failed, and the
// finalizer dropped once the VMI is final with no live Pod. It also counts
// the API writes the controller needed to reach Scheduled.
func TestLifecycle(t *testing.T) {
	ns := newNamespace(t, "lifecycle")
	r := startController(t, ns, nil)
	created := createVMI(t, ns, newVMI("vm1"))

	vmi := waitVMI(t, ns, "vm1", "Scheduling", func(v *v1.VirtualMachineInstance) bool { return v.Status.Phase == v1.Scheduling })
	if !hasFinalizer(vmi) {
		t.Errorf("no finalizer %s: %v", Finalizer, vmi.Finalizers)
	}
	if len(vmi.Status.PhaseTransitionTimestamps) != 2 || vmi.Status.PhaseTransitionTimestamps[0].Phase != v1.Pending {
		t.Errorf("phase timestamps %+v", vmi.Status.PhaseTransitionTimestamps)
	}
	pod := podOf(t, vmi)
	if pod.Labels[launcherpod.CreatedByLabel] != string(created.UID) || pod.Labels["app"] != "demo" {
		t.Errorf("pod labels %v", pod.Labels)
	}
	if ref := metav1.GetControllerOf(pod); ref == nil || ref.UID != created.UID {
		t.Errorf("pod owner %+v", ref)
	}
	if pods := launcherPods(t, ns); len(pods) != 1 {
		t.Fatalf("%d launcher pods, want 1", len(pods))
	}

	// The scheduler cannot place it.
	const unsched = "0/1 nodes are available: 1 Insufficient devices.kemu.dev/tun."
	setPodStatus(t, ns, pod.Name, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodPending
		s.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: unsched, LastTransitionTime: metav1.Now()}}
	})
	vmi = waitVMI(t, ns, "vm1", "PodScheduled False", func(v *v1.VirtualMachineInstance) bool {
		c := condition(v, ConditionPodScheduled)
		return c != nil && c.Status == corev1.ConditionFalse && c.Reason == "Unschedulable" && c.Message == unsched
	})
	if vmi.Status.Phase != v1.Scheduling {
		t.Errorf("phase %s while unschedulable", vmi.Status.Phase)
	}

	// Bound: Scheduled.
	bind(t, pod)
	vmi = waitVMI(t, ns, "vm1", "Scheduled", func(v *v1.VirtualMachineInstance) bool { return v.Status.Phase == v1.Scheduled })
	if vmi.Status.NodeName != nodeName || vmi.Status.ActivePods[pod.UID] != nodeName || vmi.Status.LauncherPod != pod.Name {
		t.Errorf("status after binding: node %q activePods %v launcherPod %q", vmi.Status.NodeName, vmi.Status.ActivePods, vmi.Status.LauncherPod)
	}
	if c := condition(vmi, ConditionPodScheduled); c != nil {
		t.Errorf("PodScheduled condition kept after binding: %+v", c)
	}
	writes := r.writes.snapshot()
	t.Logf("API writes to reach Scheduled: %v", writes)
	if n := writes["POST pods"]; n != 1 {
		t.Errorf("%d pod creations", n)
	}
	if n := writes["PUT virtualmachineinstances/status"] + writes["PATCH virtualmachineinstances"]; n > 4 {
		t.Errorf("%d VMI writes to Scheduled (finalizer + Scheduling + Unschedulable + Scheduled expected)", n)
	}

	// The image of the containerDisk cannot be pulled.
	setPodStatus(t, ns, pod.Name, func(s *corev1.PodStatus) {
		s.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
		s.InitContainerStatuses = []corev1.ContainerStatus{{Name: "container-disk-0", Image: "quay.io/containerdisks/cirros:6.2",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: "manifest unknown"}}}}
	})
	waitVMI(t, ns, "vm1", "Synchronized False ErrImagePull", func(v *v1.VirtualMachineInstance) bool {
		c := condition(v, v1.VirtualMachineInstanceSynchronized)
		return c != nil && c.Status == corev1.ConditionFalse && c.Reason == "ErrImagePull" && strings.Contains(c.Message, "manifest unknown")
	})

	// The Pod runs; the node agent reports Running with its own condition.
	setPodStatus(t, ns, pod.Name, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodRunning
		s.InitContainerStatuses = nil
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: "compute", Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
	})
	waitVMI(t, ns, "vm1", "image error cleared", func(v *v1.VirtualMachineInstance) bool {
		return condition(v, v1.VirtualMachineInstanceSynchronized) == nil
	})
	vmi = waitVMI(t, ns, "vm1", "fresh", func(*v1.VirtualMachineInstance) bool { return true })
	vmi.Status.Phase = v1.Running
	vmi.Status.Conditions = append(vmi.Status.Conditions, v1.VirtualMachineInstanceCondition{
		Type: v1.VirtualMachineInstanceReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()})
	if _, err := admin.kemu.KemuV1alpha1().VirtualMachineInstances(ns).UpdateStatus(context.Background(), vmi, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The launcher is OOM-killed: Failed with the reason.
	setPodStatus(t, ns, pod.Name, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodFailed
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: "compute",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}}}}
	})
	vmi = waitVMI(t, ns, "vm1", "Failed", func(v *v1.VirtualMachineInstance) bool { return v.Status.Phase == v1.Failed })
	if vmi.Status.Reason != "OOMKilled" {
		t.Errorf("reason %q, want OOMKilled", vmi.Status.Reason)
	}
	if c := condition(vmi, v1.VirtualMachineInstanceReady); c == nil {
		t.Errorf("the node agent's Ready condition was overwritten: %+v", vmi.Status.Conditions)
	}
	waitEvent(t, ns, "vm1", "Failed", "OOMKilled")
	waitEvent(t, ns, "vm1", "Scheduled", nodeName)
	waitVMI(t, ns, "vm1", "finalizer removed", func(v *v1.VirtualMachineInstance) bool { return !hasFinalizer(v) })
}

// TestDeletion: deleting a VMI deletes its Pod with the Pod's grace period
// (the VMI's + 15 s); the finalizer keeps the VMI until the Pod is gone.
func TestDeletion(t *testing.T) {
	ns := newNamespace(t, "deletion")
	startController(t, ns, nil)
	x := newVMI("vm1")
	grace := int64(7)
	x.Spec.TerminationGracePeriodSeconds = &grace
	createVMI(t, ns, x)
	vmi := waitVMI(t, ns, "vm1", "Scheduling", func(v *v1.VirtualMachineInstance) bool { return v.Status.Phase == v1.Scheduling })
	pod := podOf(t, vmi)
	bind(t, pod)
	waitVMI(t, ns, "vm1", "Scheduled", func(v *v1.VirtualMachineInstance) bool { return v.Status.Phase == v1.Scheduled })

	if err := admin.kemu.KemuV1alpha1().VirtualMachineInstances(ns).Delete(context.Background(), "vm1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The Pod is terminating with the padded grace period; the VMI waits.
	var terminating *corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, pollTimeout, true,
		func(ctx context.Context) (bool, error) {
			p, err := admin.kube.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			terminating = p
			return p.DeletionTimestamp != nil, nil
		})
	if err != nil {
		t.Fatalf("the Pod is not being deleted: %v", err)
	}
	if g := terminating.DeletionGracePeriodSeconds; g == nil || *g != grace+template.GracePeriodPadding {
		t.Errorf("deletion grace %v, want %d", g, grace+template.GracePeriodPadding)
	}
	vmi = waitVMI(t, ns, "vm1", "deleting", func(v *v1.VirtualMachineInstance) bool { return v.DeletionTimestamp != nil })
	if !hasFinalizer(vmi) {
		t.Fatal("the VMI lost its finalizer while its Pod runs")
	}
	// The kubelet confirms the Pod is gone.
	zero := int64(0)
	if err := admin.kube.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, pollTimeout, true,
		func(ctx context.Context) (bool, error) {
			_, err := admin.kemu.KemuV1alpha1().VirtualMachineInstances(ns).Get(ctx, "vm1", metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
	if err != nil {
		t.Fatalf("the VMI is not gone after its Pod: %v", err)
	}
	waitEvent(t, ns, "vm1", ReasonSuccessfulDelete, pod.Name)
}

// TestPodVanished: a Pod deleted behind the controller's back before the
// VMI runs fails the VMI (reason PodVanished); a Pod that failed before
// being scheduled (evicted) fails it with the Pod's reason, and so does a
// Pod that Kubernetes disrupted and removed at once.
func TestPodVanished(t *testing.T) {
	ns := newNamespace(t, "vanished")
	startController(t, ns, nil)
	createVMI(t, ns, newVMI("gone"))
	createVMI(t, ns, newVMI("evicted"))

	vmi := waitVMI(t, ns, "gone", "Scheduling", func(v *v1.VirtualMachineInstance) bool { return v.Status.Phase == v1.Scheduling })
	pod := podOf(t, vmi)
	bind(t, pod)
	waitVMI(t, ns, "gone", "Scheduled", func(v *v1.VirtualMachineInstance) bool { return v.Status.Phase == v1.Scheduled })
	zero := int64(0)
	if err := admin.kube.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	vmi = waitVMI(t, ns, "gone", "Failed", func(v *v1.VirtualMachineInstance) bool { return v.Status.Phase == v1.Failed })
	if vmi.Status.Reason != ReasonPodVanished {
		t.Errorf("reason %q, want %s", vmi.Status.Reason, ReasonPodVanished)
	}
	waitVMI(t, ns, "gone", "finalizer removed", func(v *v1.VirtualMachineInstance) bool { return !hasFinalizer(v) })

	vmi = waitVMI(t, ns, "evicted", "Scheduling", func(v *v1.VirtualMachineInstance) bool { return v.Status.Phase == v1.Scheduling })
	setPodStatus(t, ns, vmi.Status.LauncherPod, func(s *corev1.PodStatus) {
		s.Phase, s.Reason, s.Message = corev1.PodFailed, "Evicted", "The node was low on resource: memory."
	})
	vmi = waitVMI(t, ns, "evicted", "Failed", func(v *v1.VirtualMachineInstance) bool { return v.Status.Phase == v1.Failed })
	if vmi.Status.Reason != "Evicted" {
		t.Errorf("reason %q, want Evicted", vmi.Status.Reason)
	}

	// A Pod of a failed node: Kubernetes marks it disrupted and removes it
	// at once (the out-of-service taint). Whether the controller's sync
	// sees the marked Pod or only its absence, the VMI fails with the
	// disruption's reason, not PodVanished.
	createVMI(t, ns, newVMI("disrupted"))
	vmi = waitVMI(t, ns, "disrupted", "Scheduling", func(v *v1.VirtualMachineInstance) bool { return v.Status.Phase == v1.Scheduling })
	pod = podOf(t, vmi)
	bind(t, pod)
	waitVMI(t, ns, "disrupted", "Scheduled", func(v *v1.VirtualMachineInstance) bool { return v.Status.Phase == v1.Scheduled })
	setPodStatus(t, ns, pod.Name, func(s *corev1.PodStatus) {
		s.Conditions = append(s.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
			Reason: "DeletionByPodGC", Message: "PodGC: node is out of service"})
	})
	if err := admin.kube.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	vmi = waitVMI(t, ns, "disrupted", "Failed", func(v *v1.VirtualMachineInstance) bool { return v.Status.Phase == v1.Failed })
	if vmi.Status.Reason != "DeletionByPodGC" {
		t.Errorf("reason %q, want DeletionByPodGC", vmi.Status.Reason)
	}
}

// TestInvalidVMI: a VMI the API server accepts (no kemu-api webhook here)
// but api/validation refuses (a CPU model QEMU would take as a request for
// its help text; the CRD's CEL rules refuse a disk without a volume
// already) fails with a condition and an event naming the field, and gets
// no Pod. So does a VMI with a local oci: image (kemuctl run's), which no
// kubelet could pull: it would hang in Scheduled otherwise.
func TestInvalidVMI(t *testing.T) {
	ns := newNamespace(t, "invalid")
	startController(t, ns, nil)
	x := newVMI("bad")
	x.Spec.Domain.CPU = &v1.CPU{Model: "help"}
	local := newVMI("local")
	local.Spec.Volumes[0].ContainerDisk.Image = "oci:_out/testguest/oci/containerdisk"
	for _, tc := range []struct {
		vmi  *v1.VirtualMachineInstance
		path string
	}{{x, "spec.domain.cpu.model"}, {local, "spec.volumes[0].containerDisk.image"}} {
		name := tc.vmi.Name
		createVMI(t, ns, tc.vmi)
		vmi := waitVMI(t, ns, name, "Failed", func(v *v1.VirtualMachineInstance) bool { return v.Status.Phase == v1.Failed })
		c := condition(vmi, v1.VirtualMachineInstanceSynchronized)
		if vmi.Status.Reason != ReasonInvalidSpec || c == nil || c.Reason != ReasonInvalidSpec ||
			!strings.Contains(c.Message, tc.path) {
			t.Errorf("%s: reason %q condition %+v", name, vmi.Status.Reason, c)
		}
		waitEvent(t, ns, name, "Failed", tc.path)
		if hasFinalizer(vmi) {
			t.Errorf("%s: an invalid VMI got the finalizer", name)
		}
	}
	if pods := launcherPods(t, ns); len(pods) != 0 {
		t.Errorf("%d pods for an invalid VMI", len(pods))
	}
}

// hostDisks: refused before any Pod unless beneath a directory of
// kemu-config hostDiskDirs; an allowed one mounts only its own file.
func TestHostDiskPolicy(t *testing.T) {
	ns := newNamespace(t, "hostdisk")
	startControllerWith(t, ns, nil, 50, template.Options{LauncherImage: launcherImage, HostDiskDirs: []string{"/var/lib/kemu-disks"}})
	withHostDisk := func(name, path string) *v1.VirtualMachineInstance {
		x := newVMI(name)
		x.Spec.Domain.Devices.Disks = append(x.Spec.Domain.Devices.Disks, v1.Disk{Name: "host"})
		x.Spec.Volumes = append(x.Spec.Volumes, v1.Volume{Name: "host", HostDisk: &v1.HostDisk{Path: path, Type: v1.HostDiskExists}})
		return x
	}
	for _, tc := range []struct{ name, path string }{
		{"etc", "/etc/shadow"},
		{"dotdot", "/var/lib/kemu-disks/../../etc/shadow"},
	} {
		createVMI(t, ns, withHostDisk(tc.name, tc.path))
		vmi := waitVMI(t, ns, tc.name, "Failed", func(v *v1.VirtualMachineInstance) bool { return v.Status.Phase == v1.Failed })
		if c := condition(vmi, v1.VirtualMachineInstanceSynchronized); vmi.Status.Reason != ReasonInvalidSpec || c == nil ||
			!strings.Contains(c.Message, "spec.volumes[1].hostDisk.path") {
			t.Errorf("%s: reason %q condition %+v", tc.path, vmi.Status.Reason, c)
		}
		waitEvent(t, ns, tc.name, "Failed", "spec.volumes[1].hostDisk.path")
	}
	createVMI(t, ns, withHostDisk("allowed", "/var/lib/kemu-disks/a.img"))
	vmi := waitVMI(t, ns, "allowed", "Scheduling", func(v *v1.VirtualMachineInstance) bool { return v.Status.Phase == v1.Scheduling })
	pod := podOf(t, vmi)
	var hostPaths []string
	for _, v := range pod.Spec.Volumes {
		if v.HostPath != nil {
			hostPaths = append(hostPaths, v.HostPath.Path+":"+string(*v.HostPath.Type))
		}
	}
	if strings.Join(hostPaths, ",") != "/var/lib/kemu-disks/a.img:File" {
		t.Errorf("host paths %v, want only the disk file", hostPaths)
	}
	if pods := launcherPods(t, ns); len(pods) != 1 {
		t.Errorf("%d launcher Pods, want 1 (only the allowed VMI's)", len(pods))
	}
}
