//go:build cluster && qemu

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
)

// TestProbes: a VMI with an httpGet readinessProbe on its guest's httpd and
// a Service selecting it becomes Ready and its launcher Pod an endpoint;
// once the guest's httpd stops, the VMI is not Ready and the endpoint is
// gone. A VM whose livenessProbe fails gets a new VMI (runStrategy Always).
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
	// The liveness VM boots meanwhile: nothing listens on 8081.
	ev.apply(t, vmiManifest(vmiOptions{name: vmName, kind: "VirtualMachine", labels: map[string]string{"kemu-e2e": vmName},
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

	// Liveness: the VM's first VMI fails its probe and a new one replaces it.
	first := ev.waitRunning(ctx, t, vmName, bootTimeout)
	if err := poll(ctx, 2*time.Second, func() error {
		v, err := ev.getVMI(ctx, vmName)
		if err != nil || v == nil || v.UID == first.UID {
			return fmt.Errorf("still the first VMI %s (%v)", first.UID, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("livenessProbe failed: VM %s got a new VMI (%s after apply)", vmName, time.Since(t0).Round(time.Second))
}
