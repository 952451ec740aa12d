//go:build cluster

package verbs

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/apiserver/apiservertest"
	"github.com/kemu-dev/kemu/apiserver/subresource"
	"github.com/kemu-dev/kemu/test/cluster"
)

// startCRDCluster starts a control plane (with a node if asked) with kemu's
// CRDs established.
func startCRDCluster(ctx context.Context, t *testing.T, opts cluster.Options) *cluster.Cluster {
	t.Helper()
	t0 := time.Now()
	opts.Logf = t.Logf
	c, err := cluster.Start(ctx, opts)
	if err != nil {
		t.Fatalf("%v (run make k8s)", err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	if err := c.InstallCRDs(); err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster with CRDs up in %s", time.Since(t0).Round(time.Millisecond))
	return c
}

// startKemuAPI runs kemu-api in the test process behind c's kube-apiserver
// (apiserver/apiservertest), which kemuctl's verbs call; nodes stands in
// for the node agents (nil: none, streams fail).
func startKemuAPI(ctx context.Context, t *testing.T, c *cluster.Cluster, nodes subresource.NodeAgents) {
	t.Helper()
	t0 := time.Now()
	in, err := apiservertest.Start(ctx, c, apiservertest.Options{Nodes: nodes})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := in.Stop(); err != nil {
			t.Error(err)
		}
	})
	t.Logf("kemu-api up in %s", time.Since(t0).Round(time.Millisecond))
}

// createVMI creates a minimal VMI and gives it a status (phase, node,
// launcher Pod) as the VMI controller and node agent would.
func createVMI(ctx context.Context, t *testing.T, kemu versioned.Interface, ns, name string, st v1.VirtualMachineInstanceStatus) *v1.VirtualMachineInstance {
	t.Helper()
	mem := resource.MustParse("128Mi")
	vmi, err := kemu.KemuV1alpha1().VirtualMachineInstances(ns).Create(ctx, &v1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1.VirtualMachineInstanceSpec{
			Domain:  v1.DomainSpec{Memory: &v1.Memory{Guest: &mem}, Devices: v1.Devices{Disks: []v1.Disk{{Name: "root"}}}},
			Volumes: []v1.Volume{{Name: "root", ContainerDisk: &v1.ContainerDiskSource{Image: "quay.io/containerdisks/cirros:6.2"}}},
		}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return setVMIStatus(ctx, t, kemu, vmi, func(s *v1.VirtualMachineInstanceStatus) { *s = st })
}

func setVMIStatus(ctx context.Context, t *testing.T, kemu versioned.Interface, vmi *v1.VirtualMachineInstance,
	mod func(*v1.VirtualMachineInstanceStatus)) *v1.VirtualMachineInstance {
	t.Helper()
	var out *v1.VirtualMachineInstance
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := kemu.KemuV1alpha1().VirtualMachineInstances(vmi.Namespace).Get(ctx, vmi.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mod(&cur.Status)
		out, err = kemu.KemuV1alpha1().VirtualMachineInstances(vmi.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// fakeNodeAgent stands in for the node agent's handling of the request
// annotations: it reports the Paused condition after kemu.dev/paused and
// acknowledges kemu.dev/soft-reboot in kemu.dev/soft-reboot-done, with a
// delay, while on.
type fakeNodeAgent struct {
	on      atomic.Bool
	reboots atomic.Int32
}

func (a *fakeNodeAgent) run(ctx context.Context, kemu versioned.Interface, ns string) {
	vmis := kemu.KemuV1alpha1().VirtualMachineInstances(ns)
	for ctx.Err() == nil {
		time.Sleep(200 * time.Millisecond)
		if !a.on.Load() {
			continue
		}
		list, err := vmis.List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		for i := range list.Items {
			vmi := &list.Items[i]
			if vmi.Status.Phase != v1.Running {
				continue
			}
			want := vmi.Annotations[v1.VMIPausedAnnotation] == "true"
			if isPaused(vmi) != want {
				st := corev1.ConditionFalse
				if want {
					st = corev1.ConditionTrue
				}
				var conds []v1.VirtualMachineInstanceCondition
				for _, c := range vmi.Status.Conditions {
					if c.Type != v1.VirtualMachineInstancePaused {
						conds = append(conds, c)
					}
				}
				vmi.Status.Conditions = append(conds, v1.VirtualMachineInstanceCondition{Type: v1.VirtualMachineInstancePaused,
					Status: st, Reason: "FakeNodeAgent", LastTransitionTime: metav1.Now()})
				_, _ = vmis.UpdateStatus(ctx, vmi, metav1.UpdateOptions{})
				continue
			}
			if r := vmi.Annotations[v1.VMISoftRebootAnnotation]; r != "" && r != vmi.Annotations[v1.VMISoftRebootDoneAnnotation] {
				vmi.Annotations[v1.VMISoftRebootDoneAnnotation] = r
				if _, err := vmis.Update(ctx, vmi, metav1.UpdateOptions{}); err == nil {
					a.reboots.Add(1)
				}
			}
		}
	}
}

// TestPauseUnpauseSoftReboot runs kemuctl pause, unpause and soft-reboot
// against a real kube-apiserver and kemu-api (in process); a goroutine
// stands in for the node agent (setting the Paused condition through the
// status subresource when kemu-api's annotation appears). Also: the errors of console and shell by name
// without a launcher Pod. Needs make k8s.
func TestPauseUnpauseSoftReboot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := startCRDCluster(ctx, t, cluster.Options{})
	startKemuAPI(ctx, t, c, nil)
	kemu := versioned.NewForConfigOrDie(c.RESTConfig())
	const ns = "default"
	agent := &fakeNodeAgent{}
	agent.on.Store(true)
	agentCtx, stopAgent := context.WithCancel(ctx)
	agentDone := make(chan struct{})
	go func() { agent.run(agentCtx, kemu, ns); close(agentDone) }()
	t.Cleanup(func() { stopAgent(); <-agentDone })

	kemuctl := func(wantCode int, args ...string) string {
		t.Helper()
		t0 := time.Now()
		stdout, stderr, code := run(t, "", append(args, "--kubeconfig", c.Kubeconfig)...)
		t.Logf("kemuctl %s: exit %d in %s", strings.Join(args, " "), code, time.Since(t0).Round(time.Millisecond))
		if code != wantCode {
			t.Fatalf("kemuctl %s: exit %d, want %d\n%s%s", strings.Join(args, " "), code, wantCode, stdout, stderr)
		}
		return stdout + stderr
	}
	expect := func(out, want string) {
		t.Helper()
		if !strings.Contains(out, want) {
			t.Errorf("output %q lacks %q", out, want)
		}
	}
	get := func(name string) *v1.VirtualMachineInstance {
		t.Helper()
		vmi, err := kemu.KemuV1alpha1().VirtualMachineInstances(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return vmi
	}

	createVMI(ctx, t, kemu, ns, "a", v1.VirtualMachineInstanceStatus{Phase: v1.Running, NodeName: "node1"})
	expect(kemuctl(0, "pause", "a"), "VMI default/a was paused\n")
	if vmi := get("a"); !isPaused(vmi) || vmi.Annotations[v1.VMIPausedAnnotation] != "true" {
		t.Errorf("after pause: %v %v", vmi.Annotations, vmi.Status.Conditions)
	}
	expect(kemuctl(1, "pause", "a", "-n", ns), "kemuctl pause: VMI default/a is already paused\n")
	expect(kemuctl(1, "soft-reboot", "a"), "kemuctl soft-reboot: VMI default/a is paused: unpause it first\n")
	expect(kemuctl(0, "unpause", "a"), "VMI default/a was unpaused\n")
	if vmi := get("a"); isPaused(vmi) || vmi.Annotations[v1.VMIPausedAnnotation] != "" {
		t.Errorf("after unpause: %v %v", vmi.Annotations, vmi.Status.Conditions)
	}
	expect(kemuctl(1, "unpause", "a"), "kemuctl unpause: VMI default/a is not paused\n")
	expect(kemuctl(0, "soft-reboot", "a"), "VMI default/a was soft rebooted\n")
	if vmi := get("a"); agent.reboots.Load() != 1 || vmi.Annotations[v1.VMISoftRebootAnnotation] == "" {
		t.Errorf("after soft-reboot: %d reboots, %v", agent.reboots.Load(), vmi.Annotations)
	}

	// No node agent: the wait times out with a clear error, after about
	// --timeout; the request stays recorded; --wait=false returns at once.
	agent.on.Store(false)
	t0 := time.Now()
	expect(kemuctl(1, "pause", "a", "--timeout", "2s"), "kemuctl pause: timed out after 2s waiting for VMI default/a to be paused "+
		"(Paused condition False, reason FakeNodeAgent); is the kemu node agent on node node1 running?\n")
	if d := time.Since(t0); d < 2*time.Second || d > 10*time.Second {
		t.Errorf("--timeout 2s took %s", d)
	}
	if vmi := get("a"); vmi.Annotations[v1.VMIPausedAnnotation] != "true" {
		t.Errorf("the pause request is not recorded: %v", vmi.Annotations)
	}
	expect(kemuctl(0, "pause", "a", "--wait=false"), "VMI default/a was scheduled to pause\n")
	agent.on.Store(true)
	expect(kemuctl(0, "unpause", "a"), "VMI default/a was unpaused\n")

	// Not found, not running, no launcher Pod.
	expect(kemuctl(1, "pause", "nope"), "kemuctl pause: VMI default/nope not found\n")
	expect(kemuctl(1, "unpause", "a", "-n", "other"), "kemuctl unpause: VMI other/a not found\n")
	b := createVMI(ctx, t, kemu, ns, "b", v1.VirtualMachineInstanceStatus{Phase: v1.Scheduled})
	expect(kemuctl(1, "pause", "b"), "kemuctl pause: VMI default/b is not running (phase Scheduled)\n")
	expect(kemuctl(1, "console", "nope"), "kemuctl console: VMI default/nope not found\n")
	expect(kemuctl(1, "shell", "b", "-c", "status"), "kemuctl shell: VMI default/b has no launcher Pod (kemu-launcher-b-")
	setVMIStatus(ctx, t, kemu, b, func(s *v1.VirtualMachineInstanceStatus) { s.Phase = v1.Succeeded })
	expect(kemuctl(1, "console", "b"), "kemuctl console: VMI default/b is not running (phase Succeeded)\n")
	expect(kemuctl(1, "soft-reboot", "b"), "kemuctl soft-reboot: VMI default/b is not running (phase Succeeded)\n")
}
