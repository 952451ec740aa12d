//go:build cluster

package migration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	"github.com/kemu-dev/kemu/api/launcherpod"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/controller"
	"github.com/kemu-dev/kemu/controller/template"
	"github.com/kemu-dev/kemu/controller/vmi"
	kubeevents "github.com/kemu-dev/kemu/kube/events"
	"github.com/kemu-dev/kemu/test/cluster"
)

// One control plane (etcd + kube-apiserver, no scheduler, kubelet or node
// agent) for the package: the tests play the scheduler (pods/binding), the
// kubelet (Pod status) and both node agents (the VMI status fields the
// table of docs/migration.md gives them).
var (
	shared *cluster.Cluster
	kube   kubernetes.Interface
	kemu   versioned.Interface
)

const (
	sourceNode  = "node-a"
	targetNode  = "node-b"
	pollTimeout = 60 * time.Second
)

func TestMain(m *testing.M) {
	ctx := context.Background()
	c, err := cluster.Start(ctx, cluster.Options{})
	if err != nil {
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
		kube, _ = kubernetes.NewForConfig(cfg)
		kemu, _ = versioned.NewForConfig(cfg)
		for _, n := range []string{sourceNode, targetNode} {
			_, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n,
				Labels: map[string]string{v1.NodeSchedulableLabel: "true", v1.NodeKVMLabel: "false"}}}, metav1.CreateOptions{})
			if err != nil {
				fmt.Fprintln(os.Stderr, "creating node:", err)
				return 1
			}
		}
		return m.Run()
	}()
	c.Stop()
	os.Exit(code)
}

// startControllers runs the VMI controller and (unless cfg is nil) the
// migration controller on the namespace, with informers of their own.
func startControllers(t *testing.T, ns string, cfg *Config) {
	t.Helper()
	rc := shared.RESTConfig()
	rc.QPS, rc.Burst = 100, 200
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	mc, err := versioned.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	recorder, stopRecorder, err := kubeevents.NewRecorder(ctx, kc, "kemu-controller")
	if err != nil {
		t.Fatal(err)
	}
	inf := controller.NewInformers(kc, mc, ns, 0)
	tmpl := template.NewService(template.Options{LauncherImage: "kemu.local/launcher:test"})
	vmic, err := vmi.New(vmi.Config{KubeClient: kc, KemuClient: mc,
		VMIInformer:  inf.Kemu.Kemu().V1alpha1().VirtualMachineInstances(),
		PodInformer:  inf.LauncherPods.Core().V1().Pods(),
		NodeInformer: inf.Kube.Core().V1().Nodes(),
		PVCInformer:  inf.Kube.Core().V1().PersistentVolumeClaims(),
		Template:     tmpl, Recorder: recorder})
	if err != nil {
		t.Fatal(err)
	}
	runs := []controller.Runnable{vmic}
	if cfg != nil {
		c := *cfg
		c.KubeClient, c.KemuClient, c.Template, c.Recorder = kc, mc, tmpl, recorder
		c.MigrationInformer = inf.Kemu.Kemu().V1alpha1().VirtualMachineInstanceMigrations()
		c.VMIInformer = inf.Kemu.Kemu().V1alpha1().VirtualMachineInstances()
		c.PodInformer = inf.LauncherPods.Core().V1().Pods()
		migc, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, migc)
	}
	inf.Start(ctx)
	done := make(chan struct{}, len(runs))
	for _, r := range runs {
		go func() {
			defer func() { done <- struct{}{} }()
			if err := r.Run(ctx, 2); err != nil {
				t.Errorf("Run: %v", err)
			}
		}()
	}
	t.Cleanup(func() {
		cancel()
		for range runs {
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Error("a controller did not stop within 30s")
			}
		}
		inf.Shutdown()
		stopRecorder()
	})
}

func newNamespace(t *testing.T, prefix string) string {
	t.Helper()
	ns, err := kube.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func poll(t *testing.T, what string, cond func(context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, pollTimeout, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func getVMI(t *testing.T, ns, name string) *v1.VirtualMachineInstance {
	t.Helper()
	out, err := kemu.KemuV1alpha1().VirtualMachineInstances(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func waitVMI(t *testing.T, ns, name, what string, cond func(*v1.VirtualMachineInstance) bool) *v1.VirtualMachineInstance {
	t.Helper()
	var last *v1.VirtualMachineInstance
	poll(t, "VMI "+name+": "+what, func(ctx context.Context) (bool, error) {
		v, err := kemu.KemuV1alpha1().VirtualMachineInstances(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = v
		return cond(v), nil
	})
	return last
}

// waitMigration polls the migration until cond holds; gone passes nil.
func waitMigration(t *testing.T, ns, name, what string, cond func(*v1.VirtualMachineInstanceMigration) bool) *v1.VirtualMachineInstanceMigration {
	t.Helper()
	var last *v1.VirtualMachineInstanceMigration
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, pollTimeout, true, func(ctx context.Context) (bool, error) {
		m, err := kemu.KemuV1alpha1().VirtualMachineInstanceMigrations(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			last = nil
			return cond(nil), nil
		}
		if err != nil {
			return false, nil
		}
		last = m
		return cond(m), nil
	})
	if err != nil {
		status := any(nil)
		if last != nil {
			status = last.Status
		}
		t.Fatalf("migration %s: waiting for %s: %v; last status %+v", name, what, err, status)
	}
	return last
}

func inPhase(p v1.VirtualMachineInstanceMigrationPhase) func(*v1.VirtualMachineInstanceMigration) bool {
	return func(m *v1.VirtualMachineInstanceMigration) bool { return m != nil && m.Status.Phase == p }
}

// setVMIStatus plays a node agent: mutate the fresh VMI's status and write
// it.
func setVMIStatus(t *testing.T, ns, name string, mutate func(*v1.VirtualMachineInstanceStatus)) {
	t.Helper()
	poll(t, "writing VMI "+name+"'s status", func(ctx context.Context) (bool, error) {
		v, err := kemu.KemuV1alpha1().VirtualMachineInstances(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		mutate(&v.Status)
		_, err = kemu.KemuV1alpha1().VirtualMachineInstances(ns).UpdateStatus(ctx, v, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return err == nil, err
	})
}

// setState plays a node agent writing its fields of the migrationState.
func setState(t *testing.T, ns, name string, mutate func(*v1.VirtualMachineInstanceMigrationState)) {
	t.Helper()
	setVMIStatus(t, ns, name, func(s *v1.VirtualMachineInstanceStatus) {
		if s.MigrationState == nil {
			t.Fatalf("VMI %s has no migrationState", name)
		}
		mutate(s.MigrationState)
	})
}

func setPodStatus(t *testing.T, ns, name string, mutate func(*corev1.PodStatus)) {
	t.Helper()
	poll(t, "writing Pod "+name+"'s status", func(ctx context.Context) (bool, error) {
		pod, err := kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		mutate(&pod.Status)
		_, err = kube.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return err == nil, err
	})
}

func podRunning(s *corev1.PodStatus) { s.Phase = corev1.PodRunning }

// bind plays the scheduler.
func bind(t *testing.T, pod *corev1.Pod, node string) {
	t.Helper()
	err := kube.CoreV1().Pods(pod.Namespace).Bind(context.Background(), &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

func getPod(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	pod, err := kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// startVMI creates a VMI, binds its Pod to the source node and plays the
// node agent: Running, LiveMigratable as given.
func startVMI(t *testing.T, ns, name string, migratable corev1.ConditionStatus) *v1.VirtualMachineInstance {
	t.Helper()
	mem := resource.MustParse("128Mi")
	_, err := kemu.KemuV1alpha1().VirtualMachineInstances(ns).Create(context.Background(), &v1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.VirtualMachineInstanceSpec{
			Domain: v1.DomainSpec{Memory: &v1.Memory{Guest: &mem},
				Devices: v1.Devices{Disks: []v1.Disk{{Name: "root", Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}}}},
			Volumes: []v1.Volume{{Name: "root", ContainerDisk: &v1.ContainerDiskSource{Image: "quay.io/containerdisks/cirros:6.2"}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v := waitVMI(t, ns, name, "Scheduling", func(v *v1.VirtualMachineInstance) bool { return v.Status.Phase == v1.Scheduling })
	pod := getPod(t, ns, v.Status.LauncherPod)
	bind(t, pod, sourceNode)
	waitVMI(t, ns, name, "Scheduled", func(v *v1.VirtualMachineInstance) bool { return v.Status.Phase == v1.Scheduled })
	setPodStatus(t, ns, pod.Name, podRunning)
	setVMIStatus(t, ns, name, func(s *v1.VirtualMachineInstanceStatus) {
		s.Phase = v1.Running
		s.PhaseTransitionTimestamps = append(s.PhaseTransitionTimestamps,
			v1.VirtualMachineInstancePhaseTransitionTimestamp{Phase: v1.Running, PhaseTransitionTimestamp: metav1.Now()})
		if migratable != "" {
			s.Conditions = append(s.Conditions, v1.VirtualMachineInstanceCondition{Type: v1.VirtualMachineInstanceIsMigratable,
				Status: migratable, Reason: "DisksNotLiveMigratable", LastTransitionTime: metav1.Now()})
		}
	})
	return getVMI(t, ns, name)
}

func createMigration(t *testing.T, ns, name, vmiName string) *v1.VirtualMachineInstanceMigration {
	t.Helper()
	m, err := kemu.KemuV1alpha1().VirtualMachineInstanceMigrations(ns).Create(context.Background(), &v1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.VirtualMachineInstanceMigrationSpec{VMIName: vmiName}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func deleteMigration(t *testing.T, ns, name string) {
	t.Helper()
	if err := kemu.KemuV1alpha1().VirtualMachineInstanceMigrations(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// targetPods lists the Pods labelled as migration targets.
func targetPods(t *testing.T, ns string) []corev1.Pod {
	t.Helper()
	pods, err := kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: launcherpod.MigrationUIDLabel})
	if err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// targetOf is the target Pod of migration m (waits for it).
func targetOf(t *testing.T, ns string, m *v1.VirtualMachineInstanceMigration) *corev1.Pod {
	t.Helper()
	var out *corev1.Pod
	poll(t, "the target Pod of "+m.Name, func(context.Context) (bool, error) {
		for _, p := range targetPods(t, ns) {
			if p.Labels[launcherpod.MigrationUIDLabel] == string(m.UID) {
				out = &p
				return true, nil
			}
		}
		return false, nil
	})
	return out
}

// podDeleted: the Pod is gone or being deleted (no kubelet finishes it).
func podDeleted(t *testing.T, ns, name string) {
	t.Helper()
	poll(t, "Pod "+name+" deleted", func(ctx context.Context) (bool, error) {
		pod, err := kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && pod.DeletionTimestamp != nil), nil
	})
}

func waitEvent(t *testing.T, ns, name, reason, contains string) {
	t.Helper()
	var seen []string
	poll(t, fmt.Sprintf("event %s %q on %s", reason, contains, name), func(ctx context.Context) (bool, error) {
		list, err := kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			return false, nil
		}
		seen = seen[:0]
		for _, e := range list.Items {
			seen = append(seen, e.Reason+": "+e.Message)
			if e.Reason == reason && strings.Contains(e.Message, contains) {
				return true, nil
			}
		}
		return false, nil
	})
}

// consistently fails when cond stops holding within d (a bounded check
// that something does not happen).
func consistently(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, d, true, func(context.Context) (bool, error) {
		return false, cond()
	})
	if err != nil && !wait.Interrupted(err) {
		t.Fatalf("%s: %v", what, err)
	}
}
