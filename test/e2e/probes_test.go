//go:build cluster && qemu

package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/kube/vmistatus"
)

// TestProbes: a VMI with an httpGet readinessProbe on its guest's httpd and
// a Service selecting it becomes Ready and its launcher Pod an endpoint;
// once the guest's httpd stops, the VMI is not Ready and the endpoint is
// gone. A VM (runStrategy RerunOnFailure) whose livenessProbe fails: the
// kubelet stops the launcher, the guest powers off on the power button, and
// the VMI still ends Failed (LivenessProbeFailed, issue 23), so a new VMI
// replaces it.
func TestProbes(t *testing.T) {
	ev := need(t)
	dumpOnFailure(t, ev)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	const name, vmName = "probe-web", "probe-live"
	t.Cleanup(func() {
		ev.c.Kubectl("-n", ns, "delete", "vmi", name, "--ignore-not-found", "--timeout=3m")  //nolint:errcheck // best effort
		ev.c.Kubectl("-n", ns, "delete", "vm", vmName, "--ignore-not-found", "--timeout=3m") //nolint:errcheck // best effort
		ev.c.Kubectl("-n", ns, "delete", "service", name, "--ignore-not-found")              //nolint:errcheck // best effort
	})
	t0 := time.Now()
	ev.apply(t, vmiManifest(vmiOptions{name: name, userData: webShellUserData, ports: []int{8080}, labels: map[string]string{"kemu-e2e": name},
		extraSpec: `readinessProbe:
  httpGet: {port: 8080, path: /index.html}
  periodSeconds: 2
  failureThreshold: 1`}))
	// The liveness VM boots meanwhile: nothing listens on 8081. Its VMIs'
	// ends are recorded from now on (the first one may end, and be replaced,
	// before the web VMI's checks are done).
	ends := ev.watchVMIEnds(ctx, t, vmName)
	ev.apply(t, vmiManifest(vmiOptions{name: vmName, kind: "VirtualMachine", runStrategy: "RerunOnFailure", labels: map[string]string{"kemu-e2e": vmName},
		extraSpec: `livenessProbe:
  tcpSocket: {port: 8081}
  initialDelaySeconds: 30
  periodSeconds: 5
  failureThreshold: 2`}))
	if _, err := ev.kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"kemu-e2e": name},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vmi := ev.waitRunning(ctx, t, name, bootTimeout)
	ev.waitCondition(ctx, t, name, v1.VirtualMachineInstanceReady, corev1.ConditionTrue, bootTimeout)
	t.Logf("Ready %s after apply", time.Since(t0).Round(time.Second))
	pod, err := ev.kube.CoreV1().Pods(ns).Get(ctx, vmi.Status.LauncherPod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	readyEndpoint := func() (bool, error) {
		slices, err := ev.kube.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + name})
		if err != nil {
			return false, err
		}
		for _, s := range slices.Items {
			for _, e := range s.Endpoints {
				if e.Conditions.Ready != nil && *e.Conditions.Ready && len(e.Addresses) > 0 && e.Addresses[0] == pod.Status.PodIP {
					return true, nil
				}
			}
		}
		return false, nil
	}
	if err := poll(ctx, time.Second, func() error {
		if ok, err := readyEndpoint(); err != nil || !ok {
			return fmt.Errorf("no ready endpoint %s of Service %s (%v)", pod.Status.PodIP, name, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("endpoint %s ready %s after apply", pod.Status.PodIP, time.Since(t0).Round(time.Second))

	// Stop the guest's httpd: the probe fails, Ready goes False, the
	// endpoint is no longer ready.
	c := ev.startConsole(t, name)
	defer c.stop()
	if err := c.runInShell(ctx, "killall httpd; echo httpd-$((6*7))-stopped", "httpd-42-stopped", time.Minute); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	ev.waitCondition(ctx, t, name, v1.VirtualMachineInstanceReady, corev1.ConditionFalse, 2*time.Minute)
	if v, err := ev.getVMI(ctx, name); err == nil {
		if r := condition(v, v1.VirtualMachineInstanceReady); r != nil {
			t.Logf("Ready %s %s %q after %s", r.Status, r.Reason, r.Message, time.Since(stopped).Round(time.Second))
		}
	}
	if err := poll(ctx, time.Second, func() error {
		if ok, err := readyEndpoint(); err != nil || ok {
			p, perr := ev.kube.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			var podReady string
			if perr == nil {
				for _, c := range p.Status.Conditions {
					if c.Type == corev1.PodReady {
						podReady = string(c.Status) + " " + c.Reason
					}
				}
			}
			return fmt.Errorf("endpoint %s still ready (%v; Pod Ready %q %v)", pod.Status.PodIP, err, podReady, perr)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("endpoint gone %s after httpd stopped", time.Since(stopped).Round(time.Second))

	// Liveness: the VM's first VMI fails its probe, ends Failed although its
	// guest powered off, and (RerunOnFailure) a new one replaces it.
	var first vmiEnd
	if err := poll(ctx, time.Second, func() error {
		all := ends.get()
		if len(all) == 0 {
			return fmt.Errorf("no VMI of VM %s ended yet", vmName)
		}
		first = all[0]
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("first VMI %s ended %s %s (%s after apply): %s", first.uid, first.phase, first.reason, time.Since(t0).Round(time.Second), first.message)
	if first.phase != v1.Failed || first.reason != vmistatus.ReasonLivenessProbeFailed {
		t.Fatalf("the first VMI ended %s (%s), want Failed (%s)", first.phase, first.reason, vmistatus.ReasonLivenessProbeFailed)
	}
	if err := poll(ctx, 2*time.Second, func() error {
		v, err := ev.getVMI(ctx, vmName)
		if err != nil || v == nil || v.UID == first.uid {
			return fmt.Errorf("no VMI but the first %s (%v)", first.uid, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("livenessProbe failed: VM %s (RerunOnFailure) got a new VMI (%s after apply)", vmName, time.Since(t0).Round(time.Second))
}

// vmiEnd is how one VMI ended.
type vmiEnd struct {
	uid             types.UID
	phase           v1.VirtualMachineInstancePhase
	reason, message string
}

// vmiEnds collects the ends of the VMIs of one name, in order.
type vmiEnds struct {
	mu   sync.Mutex
	seen map[types.UID]bool
	list []vmiEnd
}

func (e *vmiEnds) get() []vmiEnd {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.list)
}

// watchVMIEnds watches the VMIs named name until ctx ends (or the test
// does) and records each one's final phase, reason and Ready message once.
func (ev *env) watchVMIEnds(ctx context.Context, t *testing.T, name string) *vmiEnds {
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	e := &vmiEnds{seen: map[types.UID]bool{}}
	go func() {
		for ctx.Err() == nil {
			w, err := ev.kemu.KemuV1alpha1().VirtualMachineInstances(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
			if err != nil {
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
				continue
			}
			for we := range w.ResultChan() {
				vmi, ok := we.Object.(*v1.VirtualMachineInstance)
				if !ok || !vmi.Status.Phase.IsFinal() {
					continue
				}
				var msg string
				if r := condition(vmi, v1.VirtualMachineInstanceReady); r != nil {
					msg = r.Message
				}
				e.mu.Lock()
				if !e.seen[vmi.UID] {
					e.seen[vmi.UID] = true
					e.list = append(e.list, vmiEnd{uid: vmi.UID, phase: vmi.Status.Phase, reason: vmi.Status.Reason, message: msg})
				}
				e.mu.Unlock()
			}
			w.Stop()
		}
	}()
	return e
}
